"""Transactional messages: half and op records, commit/rollback (``transaction``) and the
check-back of forgotten halves (``check``)."""
