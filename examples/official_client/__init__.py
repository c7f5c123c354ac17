"""Our own short scripts, one per scenario of the official Python client's examples.

These are NOT apache/rocketmq-clients' ``python/example/`` files (those are not copied
here): each script is written for this project and uses the same public API the
corresponding example uses — ``Producer.send`` / ``send_async``, ``delivery_timestamp``,
``message_group``, ``begin_transaction`` with a ``TransactionChecker``, ``SimpleConsumer``
``receive`` / ``receive_async``, ``PushConsumer``, ``Message.priority``, ``lite_topic`` and
``LitePushConsumer.subscribe_lite`` — against an endpoint given on the command line.
Each prints one JSON line saying what it achieved, which
``tests/test_official_client_scenarios.py`` checks against a real broker process::

    python -m examples.official_client.normal_producer 127.0.0.1:8081 my-topic 10
"""
