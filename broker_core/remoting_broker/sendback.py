"""CONSUMER_SEND_MSG_BACK (36): a 4.x consumer hands back a message it failed to consume.

Header (``ConsumerSendMsgBackRequestHeader``): offset (the message's commitlog offset, from
the pull record), group, delayLevel, originMsgId, originTopic, maxReconsumeTimes.

As RocketMQ's broker does: the message (read at ``offset``) is stored again, with its
reconsume count plus one, in ``%RETRY%group``, held for its delay; once it has been
reconsumed ``max`` times (or ``delayLevel`` < 0) it goes to ``%DLQ%group`` instead.
``max`` is the smaller of the client's ``maxReconsumeTimes`` (when >= 0) and the group's
retry policy ``max_retries``, so an operator's policy applies to 4.x clients too. The
delay: the client's ``delayLevel`` when > 0 (the ``DELAY`` property, levels 1-18); for 0
the group's retry policy (RocketMQ's default policy is delay level 3 + reconsume times; a
custom or exponential backoff's delay is sent as the delay level of that length when one
of the 18 has it, e.g. ``1s`` is level 1, else as a delivery time). The properties are kept (the
UNIQ_KEY, so the client sees the same message id), plus ``RETRY_TOPIC`` (the original
topic, which the client restores) and ``ORIGIN_MESSAGE_ID``.
"""

from __future__ import annotations

import logging

from broker_core.broker.retry import DELAY_LEVELS_MS, DelayLevelBackoff, dlq_topic, retry_topic
from broker_core.clock import now_ms
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    Message,
)
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_int, field_str

log = logging.getLogger(__name__)


def handle_send_back(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    group = field_str(fields, "group")
    delay_level = field_int(fields, "delayLevel", 0)
    broker = ctx.broker
    old = broker.message_at(field_int(fields, "offset"))
    log.info("send back %s: %s", fields, old)
    policy = broker.group(group).retry_policy
    client_max = field_int(fields, "maxReconsumeTimes", -1)
    max_times = policy.max_retries if client_max < 0 else min(client_max, policy.max_retries)
    props = {
        k: v
        for k, v in old.properties.items()
        if k not in (PROPERTY_DELAY_LEVEL, PROPERTY_DELIVER_TIME_MS)
    }
    props.setdefault(PROPERTY_RETRY_TOPIC, old.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, fields.get("originMsgId") or old.message_id)
    retries = old.reconsume_times + 1
    if old.reconsume_times >= max_times or delay_level < 0:
        topic = broker.topics.ensure_dlq_topic(group).name
    else:
        topic = broker.topics.ensure_retry_topic(group).name
        if delay_level > 0:
            props[PROPERTY_DELAY_LEVEL] = str(delay_level)
        elif isinstance(policy.backoff, DelayLevelBackoff):
            props[PROPERTY_DELAY_LEVEL] = str(policy.backoff.level_for_retry(retries))
        elif (wait_ms := policy.backoff.delay_ms(retries)) in DELAY_LEVELS_MS:
            props[PROPERTY_DELAY_LEVEL] = str(DELAY_LEVELS_MS.index(wait_ms) + 1)
        else:
            props[PROPERTY_DELIVER_TIME_MS] = str(now_ms() + wait_ms)
    assert topic in (retry_topic(group), dlq_topic(group))
    msg = Message(
        topic=topic,
        body=old.body,
        queue_id=-1,
        properties=props,
        flag=old.flag,
        sys_flag=old.sys_flag,
        born_timestamp_ms=old.born_timestamp_ms,
        born_host=old.born_host,
        reconsume_times=retries,
    )
    broker.sending.send([msg])
    log.debug(
        "sent back %s of %s (reconsumed %d times) to %s",
        msg.properties.get("UNIQ_KEY"),
        old.topic,
        old.reconsume_times,
        topic,
    )
    return req.response(ResponseCode.SUCCESS)
