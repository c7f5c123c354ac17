"""Transactional messages: the service (``transaction``: prepare, commit/rollback, the check
thread), the records it writes (``records``) and the check-back state and recovery
(``check``)."""
