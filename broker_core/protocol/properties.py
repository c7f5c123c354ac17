"""The system-property registry: the keys the broker gives meaning to.

A producer may not set these as user properties (RocketMQ's ``MessageConst.STRING_HASH_SET``
plays this part), and a consumer is handed them as system fields, never as user
properties. The keys defined in ``broker_core.message`` are the ones the store itself
reads; the rest are declared here, once, and the broker modules that act on them import
them from here.

>>> PROPERTY_LITE_TOPIC in SYSTEM_PROPERTY_KEYS, "region" in SYSTEM_KEYS
(True, False)
"""

from __future__ import annotations

from typing import Final

from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_CONSUME_START_TIME,
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_ID,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
)

PROPERTY_LITE_TOPIC: Final = "__LITE_TOPIC"  # RocketMQ's MessageConst.PROPERTY_LITE_TOPIC
PROPERTY_PRIORITY: Final = "_SYS_MSG_PRIORITY_"  # RocketMQ's MessageConst.PROPERTY_PRIORITY
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"  # internal: the due time in ms
# RocketMQ's name: the producer's minimum wait, in seconds, before the first check-back.
PROPERTY_CHECK_IMMUNITY_S: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Ours: broker clock time the current check timeout counts from (prepare or last check).
PROPERTY_CHECK_BASE_MS: Final = "__TRANS_CHECK_BASE_MS"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"  # the producer's trace context

# Keys the broker gives meaning to: SendMessage refuses them as user properties.
SYSTEM_PROPERTY_KEYS: Final = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY_LEVEL,
        PROPERTY_DELIVER_TIME_MS,
        PROPERTY_TIMER_ID,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_ORIGIN_MESSAGE_ID,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_CHECK_TIMES,
        PROPERTY_MESSAGE_GROUP,
        PROPERTY_CONSUME_START_TIME,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_CHECK_IMMUNITY_S,
        PROPERTY_CHECK_BASE_MS,
        "WAIT",
        "RECONSUME_TIME",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "TRACE_ON",
        "MSG_REGION",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "POP_CK",
        "1ST_POP_TIME",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "TRACE_CONTEXT",
        "BORNHOST",
        "CLUSTER",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "MSG_TYPE",
        PROPERTY_PRIORITY,
        PROPERTY_LITE_TOPIC,
    }
)

# Keys that are ours or RocketMQ's, never the user's: what a delivery strips from the user
# properties (one list with the one SendMessage refuses from users).
SYSTEM_KEYS: Final[frozenset[str]] = SYSTEM_PROPERTY_KEYS | {PROPERTY_TRACE_CONTEXT}
