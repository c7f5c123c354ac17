"""Broker groups: one master, slaves that copy its commitlog byte for byte (RocketMQ's HA).

``wire`` is the protocol, ``master`` the master's HA port and in-sync set, ``slave`` the
slave's link to it, ``metadata`` the config tables a slave copies, ``group`` runs them for
one broker, over the narrow interfaces in ``ports`` (nothing here imports the broker).
docs/ARCHITECTURE.md ("Replication") describes the whole.
"""
