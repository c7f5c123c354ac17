"""The broker's own message trace: what it saw of each traced message, in the trace topic.

``selection`` decides which messages and groups are traced (config ``trace_broker``,
``trace_topics``, ``trace_groups``); ``records`` turns what the hooks saw into
:class:`~broker_core.protocol.trace.TraceRecord` s (``appends`` the store's appends:
Stored, Retry, DLQ); ``recorder`` buffers the hooks' calls
and writes the records in batches from one ``ServiceThread``. The record format is in
``broker_core.protocol.trace``; ``timeline`` merges client and broker records of one
message id into the events ``rmq message trace`` shows.
"""
