"""The NameServer: soft-state routes that brokers register with (RocketMQ's model).

``model`` (the shared dataclasses), ``wire`` (JSON bodies), ``route_table`` (the tables and
their rules), ``processor`` (one handler per request code), ``server`` (the process) and
``client`` (``NameServerClient``, used by brokers, admin tools and clients).
"""
