"""What both sides of the wire agree on: the shared record and protocol package.

Like Kafka's ``common.record``, every layer may import this package and it imports none
of them (only the leaf modules ``broker_core.errors`` and ``broker_core.message``;
``tests/protocol/test_layers.py`` holds it to that)::

    unit.py        the commitlog message unit: one field table → struct.Struct + numpy dtype
    verify.py      the unit verifier (CRCs, positions, magic), used by the store and the client
    spans.py       gathering byte spans of a buffer in bulk (numpy)
    status.py      our errors ↔ ``apache.rocketmq.v2.Code``
    properties.py  the system-property registry (keys a producer may not set)
    durations.py   ``"10s"``-style duration parsing
    filters.py     tag and SQL92 filter expressions (sql92.py), evaluated by broker and client
"""
