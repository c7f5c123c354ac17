"""POP consumption: the service, its durable state and revive log, queue scanning, revive policy
and receipt handles."""
