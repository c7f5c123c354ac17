"""Read options of the ``rocketmq`` source: parsed once, checked completely, named in errors.

Names mirror Spark's Kafka source where the two overlap, and Kafka's own names are
accepted as aliases (``subscribe``, ``subscribePattern``, ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger``, ``maxRecordsPerPartition``: :mod:`connector.option_names`).
Spark hands options over lower-cased; every error is a
:class:`~broker_core.errors.ConfigError` whose message starts with the option's name, and
an unknown option is an error too (with the closest known name suggested).

==========================  =======================================================  ========
option                      value                                                     default
==========================  =======================================================  ========
endpoints                   ``host:port[,host:port]``: the brokers (this or namesrv)
namesrv                     ``host:port[;host:port]``: NameServers; each topic's route
                            names its broker groups, each queue is read from the
                            master of the group that owns it
topic / topics /            exactly one: a topic, a comma list, or a regex matched
topicPattern / assign       against the whole name of every topic the brokers list,
                            or JSON ``{"t": ["broker-a:0", "broker-a:3"]}``: only
                            those queues
startingOffsets             ``earliest``, ``latest``, ``group`` or JSON per queue      batch
                            ``{"t": {"broker-a:0": 12}}`` (-2 earliest, -1 latest)      earliest,
                            queues not named start at the default                     stream
                                                                                      latest
startingTimestamp           epoch ms: each queue starts at its first message stored
                            at or after it (not with startingOffsets)
startingOffsetsByTimestamp  JSON epoch ms per queue ``{"t": {"broker-a:0": ms}}``
startingOffsetsByTimestamp  a starting time after a queue's last message: ``error``    see
Strategy                    or ``latest`` (error for …ByTimestamp, latest for          left
                            startingTimestamp)
groupFallback               with ``startingOffsets=group`` (needs consumerGroup): a    earliest
                            queue the group never committed starts at ``earliest``,
                            ``latest``, or fails (``error``)
endingOffsets               batch only: ``latest`` or JSON as above                    latest
endingTimestamp             batch only: epoch ms, end before the first message
                            stored at or after it (not with endingOffsets)
endingOffsetsByTimestamp    batch only: JSON epoch ms per queue
minPartitions               split queue ranges so a read has at least N partitions
maxMessagesPerPartition     cut ranges longer than N offsets (connector.partitioning)
maxMessagesPerTrigger       stream only: at most N messages per micro-batch, split
                            across queues by backlog
minMessagesPerTrigger       stream only: wait for N messages before a micro-batch …
maxTriggerDelay             … but no longer than this duration (``15m``, ``30s``)      15m
maxBytesPerTrigger          stream only: about N bytes per micro-batch (``64m``),
                            from sampled message sizes (a soft limit)
tagExpression               broker-side tag filter: ``*`` or ``TagA || TagB``
sqlFilter                   broker-side SQL92 filter on properties (not with
                            tagExpression)
failOnDataLoss              ``true``: offsets removed by retention fail the query;     true
                            ``false``: skip them and log a warning
consumerGroup               group the pulls are made as (and commits go to); default
                            ``spark-rocketmq-source``
commitOffsets               stream only: after each batch, commit its end offsets as   false
                            the group's offsets (needs consumerGroup)
includeProperties           ``false`` leaves the ``properties`` column null            true
trace                       ``true``: a SubBefore trace record per message read, with  false
                            the query id, batch id, partition and offsets
==========================  =======================================================  ========

>>> opts = parse_read_options({"endpoints": "127.0.0.1:8081", "topic": "orders"},
...                           streaming=False)
>>> opts.topics, opts.starting.kind, opts.ending.kind
(('orders',), 'earliest', 'latest')
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.message import validate_topic_name
from broker_core.protocol.filters import TagFilter, compile_sql
from connector import credentials
from connector.credentials import NO_ACCESS, Access
from connector.offset_options import OffsetSpec, parse_assign, parse_offset_spec
from connector.offsets import QueueRef
from connector.option_names import KNOWN_OPTIONS, canonical_names
from connector.option_parse import (
    boolean,
    byte_count,
    duration_ms,
    group_name,
    option_error,
    parse_endpoints,
    parse_namesrv,
    positive_int,
)

__all__ = ["KNOWN_OPTIONS", "OffsetSpec", "ReadOptions", "parse_read_options"]

DEFAULT_GROUP: Final = "spark-rocketmq-source"
DEFAULT_MAX_TRIGGER_DELAY_MS: Final = 15 * 60_000

STREAM_ONLY: Final = (
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "commitOffsets",
)
BATCH_ONLY: Final = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")


@dataclass(frozen=True)
class ReadOptions:
    """Every read option, parsed and checked (see the module docstring for meanings)."""

    endpoints: tuple[str, ...]  # empty with namesrv
    namesrv: str | None
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec | None  # None for streaming reads
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes_per_trigger: int | None = None
    filter_expression: str | None = None
    filter_type: Literal["TAG", "SQL"] = "TAG"
    tags: frozenset[str] | None = None  # the tags tagExpression accepts; None = all
    fail_on_data_loss: bool = True
    consumer_group: str = DEFAULT_GROUP
    commit_offsets: bool = False
    include_properties: bool = True
    trace: bool = False
    access: Access = NO_ACCESS  # accessKey/secretKey/tls/caFile (connector/credentials.py)
    assigned: frozenset[QueueRef] | None = None  # assign: the only queues read
    min_partitions: int | None = None
    max_messages_per_partition: int | None = None

    def matches_topic(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (by name, by ``topicPattern`` or by ``assign``)."""
        if self.topics is not None:
            return topic in self.topics
        pattern = self.topic_pattern
        return pattern is not None and re.fullmatch(pattern, topic) is not None

    def reads_queue(self, ref: QueueRef) -> bool:
        """Whether the queue ``ref`` is read: its topic is subscribed, and it is assigned
        when ``assign`` names queues."""
        if self.assigned is not None:
            return ref in self.assigned
        return self.matches_topic(ref.topic)


def _topic_names(option: str, text: str) -> tuple[str, ...]:
    names = [t.strip() for t in text.split(",")] if option == "topics" else [text.strip()]
    for name in names:
        try:
            validate_topic_name(name)
        except InvalidArgumentError as exc:
            raise option_error(option, f"{exc} (in {text!r})") from None
    return tuple(dict.fromkeys(names))


def _subscription(
    given: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, frozenset[QueueRef] | None]:
    """(topics, pattern, assigned queues): from exactly one of topic / topics /
    topicPattern / assign (Kafka: subscribe = topics, subscribePattern = topicPattern)."""
    chosen = [name for name in ("topic", "topics", "topicPattern", "assign") if name in given]
    if len(chosen) != 1:
        raise ConfigError(
            "option 'topic' / 'topics' / 'topicPattern' / 'assign' (Kafka's subscribe = "
            f"topics, subscribePattern = topicPattern): exactly one is required, got "
            f"{chosen or 'none'}"
        )
    name = chosen[0]
    if name == "assign":
        queues = parse_assign(given[name])
        return tuple(sorted({ref.topic for ref in queues})), None, queues
    if name != "topicPattern":
        return _topic_names(name, given[name]), None, None
    try:
        re.compile(given[name])
    except re.error as exc:
        raise option_error(name, f"not a valid regular expression: {exc}") from None
    return None, given[name], None


def _filter(
    given: Mapping[str, str],
) -> tuple[str | None, Literal["TAG", "SQL"], frozenset[str] | None]:
    if "tagExpression" in given and "sqlFilter" in given:
        raise option_error("sqlFilter", "give either tagExpression or sqlFilter, not both")
    if "sqlFilter" in given:
        try:
            compile_sql(given["sqlFilter"])
        except InvalidArgumentError as exc:
            raise option_error("sqlFilter", str(exc)) from None
        return given["sqlFilter"], "SQL", None
    if "tagExpression" not in given:
        return None, "TAG", None
    try:
        parsed = TagFilter.parse(given["tagExpression"])
    except InvalidArgumentError as exc:
        raise option_error("tagExpression", str(exc)) from None
    if parsed.match_all:
        return None, "TAG", None
    return parsed.expression, "TAG", parsed.tags


def _check_mode(given: Mapping[str, str], streaming: bool) -> None:
    for name in BATCH_ONLY if streaming else STREAM_ONLY:
        if name in given:
            raise option_error(
                name, f"applies to {'batch' if streaming else 'streaming'} reads only"
            )
    if ("endpoints" in given) == ("namesrv" in given):
        raise ConfigError(
            "option 'endpoints' / 'namesrv': exactly one is required "
            "(endpoints: host:port[,host:port] of the brokers; namesrv: "
            "host:port[;host:port] of the NameServers)"
        )
    if "maxTriggerDelay" in given and "minMessagesPerTrigger" not in given:
        raise option_error("maxTriggerDelay", "only applies together with minMessagesPerTrigger")
    if boolean("commitOffsets", given.get("commitOffsets", "false")) and (
        "consumerGroup" not in given
    ):
        raise option_error(
            "commitOffsets", "needs consumerGroup: the group whose offsets to commit"
        )


def _group(given: Mapping[str, str]) -> str:
    return group_name("consumerGroup", given.get("consumerGroup", DEFAULT_GROUP).strip())


def _optional(given: Mapping[str, str], name: str, parse: Callable[[str, str], int]) -> int | None:
    return parse(name, given[name]) if name in given else None


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse and check every option of a batch (``streaming=False``) or stream read.

    ConfigError names the offending option as documented, or by its Kafka alias when the
    user gave it that way (see :mod:`connector.option_names`).
    """
    names = canonical_names(options)
    try:
        return _parse(names.values, streaming)
    except ConfigError as exc:
        raise names.as_written(exc) from None


def _parse(given: Mapping[str, str], streaming: bool) -> ReadOptions:
    _check_mode(given, streaming)
    topics, pattern, assigned = _subscription(given)
    expression, filter_type, tags = _filter(given)
    return ReadOptions(
        endpoints=parse_endpoints(given["endpoints"]) if "endpoints" in given else (),
        namesrv=parse_namesrv(given["namesrv"]) if "namesrv" in given else None,
        topics=topics,
        topic_pattern=pattern,
        starting=parse_offset_spec(given, start=True, streaming=streaming),
        ending=None if streaming else parse_offset_spec(given, start=False, streaming=False),
        max_messages_per_trigger=_optional(given, "maxMessagesPerTrigger", positive_int),
        min_messages_per_trigger=_optional(given, "minMessagesPerTrigger", positive_int),
        max_trigger_delay_ms=_optional(given, "maxTriggerDelay", duration_ms)
        or DEFAULT_MAX_TRIGGER_DELAY_MS,
        max_bytes_per_trigger=_optional(given, "maxBytesPerTrigger", byte_count),
        filter_expression=expression,
        filter_type=filter_type,
        tags=tags,
        fail_on_data_loss=boolean("failOnDataLoss", given.get("failOnDataLoss", "true")),
        consumer_group=_group(given),
        commit_offsets=boolean("commitOffsets", given.get("commitOffsets", "false")),
        include_properties=boolean("includeProperties", given.get("includeProperties", "true")),
        trace=boolean("trace", given.get("trace", "false")),
        access=credentials.parse_access(given),
        assigned=assigned,
        min_partitions=_optional(given, "minPartitions", positive_int),
        max_messages_per_partition=_optional(given, "maxMessagesPerPartition", positive_int),
    )
