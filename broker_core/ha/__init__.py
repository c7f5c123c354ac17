"""Broker groups: one master, slaves that copy its commitlog byte for byte (RocketMQ's HA).

``wire`` is the protocol, ``master`` the master's HA port and in-sync set, ``slave`` the
slave's link to it, ``metadata`` the config tables a slave copies, ``group`` wires them
into a ``Broker``. docs/ARCHITECTURE.md ("Replication") describes the whole.
"""
