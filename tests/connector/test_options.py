"""Read options, offsets JSON and the budget split: pure functions, no broker, no Spark."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyspark.sql.types import StructField, StructType

from broker_core.errors import ConfigError
from connector.arrow import SCHEMA, check_schema
from connector.offsets import QueueRef, from_json, split_budget, to_json
from connector.options import DEFAULT_GROUP, KNOWN_OPTIONS, parse_read_options
from connector.partitioning import piece_bounds, split_counts

BASE = {"endpoints": "127.0.0.1:8081", "topic": "orders"}


def batch(**extra: str):
    return parse_read_options({**BASE, **extra}, streaming=False)


def stream(**extra: str):
    return parse_read_options({**BASE, **extra}, streaming=True)


# ---- defaults and good values -----------------------------------------------------------


def test_defaults_batch_and_stream() -> None:
    b, s = batch(), stream()
    assert (b.starting.kind, b.ending.kind) == ("earliest", "latest")
    assert s.starting.kind == "latest" and s.ending is None
    assert b.fail_on_data_loss and b.include_properties and not b.commit_offsets
    assert b.consumer_group == DEFAULT_GROUP and b.filter_expression is None


def test_names_are_case_insensitive_and_values_parsed() -> None:
    opts = parse_read_options(
        {
            "ENDPOINTS": "h:1,h:2, h:1",
            "Topics": "a, b,a",
            "maxmessagespertrigger": "10",
            "MINMESSAGESPERTRIGGER": "5",
            "maxTriggerDelay": "30s",
            "maxBytesPerTrigger": "64m",
            "failOnDataLoss": "FALSE",
            "consumerGroup": "GID_x",
            "commitOffsets": "true",
            "includeProperties": "false",
        },
        streaming=True,
    )
    assert opts.endpoints == ("h:1", "h:2") and opts.topics == ("a", "b")
    assert (opts.max_messages_per_trigger, opts.min_messages_per_trigger) == (10, 5)
    assert (opts.max_trigger_delay_ms, opts.max_bytes_per_trigger) == (30_000, 64 << 20)
    assert not opts.fail_on_data_loss and opts.commit_offsets and not opts.include_properties
    assert opts.consumer_group == "GID_x"


def test_offsets_json_and_timestamps() -> None:
    opts = batch(
        startingOffsets='{"orders": {"broker-a:0": 5, "broker-a:1": -2}}',
        endingTimestamp="1700000000000",
    )
    assert opts.starting.offsets == {
        QueueRef("orders", "broker-a", 0): 5,
        QueueRef("orders", "broker-a", 1): -2,
    }
    assert opts.ending.kind == "timestamp" and opts.ending.timestamp_ms == 1_700_000_000_000
    assert stream(startingTimestamp="0").starting.timestamp_ms == 0


def test_filters() -> None:
    assert batch(tagExpression="A || B").tags == frozenset({"A", "B"})
    assert batch(tagExpression="*").filter_expression is None
    sql = batch(sqlFilter="region = 'eu' AND amount > 10")
    assert (sql.filter_type, sql.filter_expression) == ("SQL", "region = 'eu' AND amount > 10")


def test_topic_pattern_matches_whole_names() -> None:
    opts = parse_read_options({"endpoints": "h:1", "topicPattern": "orders-.*"}, streaming=False)
    assert opts.matches_topic("orders-eu") and not opts.matches_topic("old-orders-eu")


# ---- every bad value names its option -----------------------------------------------------

BAD_VALUES = [
    ("accessKey", "ak-without-secret", False),
    ("secretKey", "secret-without-key", True),
    ("tls", "maybe", False),
    ("caFile", "/no/such/ca.pem", True),
    ("endpoints", "nohostport", False),
    ("endpoints", "", False),
    ("endpoints", "h:1,,h:2", False),
    ("endpoints", "h:99999", False),
    ("namesrv", "nohostport", False),
    ("namesrv", "h:1;;h:2", False),
    ("namesrv", "h:99999", False),
    ("namesrv", " ", False),
    ("topic", "bad topic!", False),
    ("topics", "a,,b", False),
    ("topicPattern", "([", False),
    ("startingOffsets", "sometime", False),
    ("startingOffsets", "{not json", False),
    ("startingOffsets", '{"orders": {"a:0": "x"}}', False),
    ("startingOffsets", '{"orders": {"nocolon": 1}}', False),
    ("startingOffsets", '{"orders": {"a:0": -3}}', False),
    ("startingOffsets", '{"orders": 5}', False),
    ("startingOffsets", "[1]", False),
    ("startingOffsets", "latest", False),
    ("startingOffsets", '{"orders": {"a:0": -1}}', False),
    ("startingTimestamp", "yesterday", False),
    ("startingTimestamp", "-5", True),
    ("endingOffsets", "earliest", False),
    ("endingOffsets", '{"orders": {"a:0": -2}}', False),
    ("endingOffsets", "soon", False),
    ("endingTimestamp", "1.5", False),
    ("maxMessagesPerTrigger", "0", True),
    ("maxMessagesPerTrigger", "ten", True),
    ("minMessagesPerTrigger", "-1", True),
    ("maxBytesPerTrigger", "12x", True),
    ("maxBytesPerTrigger", "0", True),
    ("tagExpression", "A ||", False),
    ("tagExpression", "A | B", False),
    ("sqlFilter", "a = ", False),
    ("sqlFilter", "", False),
    ("failOnDataLoss", "yes", False),
    ("consumerGroup", "bad group", False),
    ("includeProperties", "1", False),
    ("trace", "1", False),
    ("commitOffsets", "maybe", True),
    ("assign", "[1]", False),
    ("assign", '{"orders": []}', True),
    ("assign", '{"orders": ["nocolon"]}', False),
    ("assign", '{"bad topic!": ["broker-a:0"]}', False),
    ("assign", '{"orders": [0]}', False),
    ("startingOffsetsByTimestamp", '{"orders": {"broker-a:0": -1}}', False),
    ("startingOffsetsByTimestamp", "latest", True),
    ("endingOffsetsByTimestamp", '{"orders": {"broker-a:0": "x"}}', False),
    ("startingOffsetsByTimestampStrategy", "nearest", False),
    ("groupFallback", "middle", False),
    ("minPartitions", "0", False),
    ("maxMessagesPerPartition", "many", True),
]


@pytest.mark.parametrize(("option", "value", "streaming"), BAD_VALUES)
def test_bad_value_is_an_error_naming_the_option(option: str, value: str, streaming: bool) -> None:
    options = {**BASE, option: value}
    if option in ("topics", "topicPattern", "assign"):
        del options["topic"]
    if option == "namesrv":
        del options["endpoints"]
    if option == "commitOffsets":
        options["consumerGroup"] = "GID_x"
    with pytest.raises(ConfigError, match=f"option '{option}'"):
        parse_read_options(options, streaming=streaming)


def test_max_trigger_delay_bad_value_and_alone() -> None:
    with pytest.raises(ConfigError, match=r"option 'maxTriggerDelay'.*bad duration"):
        stream(minMessagesPerTrigger="5", maxTriggerDelay="soon")
    with pytest.raises(ConfigError, match=r"option 'maxTriggerDelay'.*minMessagesPerTrigger"):
        stream(maxTriggerDelay="5s")


def test_every_option_has_a_bad_value_test() -> None:
    tested = {option for option, _, _ in BAD_VALUES} | {"maxTriggerDelay"}
    assert tested == set(KNOWN_OPTIONS.values())


@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"endpoints": "h:1", "topic": "a", "colour": "red"}, False, "colour"),
        ({"topic": "a"}, False, "endpoints"),
        ({"endpoints": "h:1"}, False, "topic' / 'topics' / 'topicPattern"),
        ({"endpoints": "h:1", "topic": "a", "topics": "a,b"}, False, "topic' / 'topics"),
        ({**BASE, "maxMessagesPerTrigger": "5"}, False, "maxMessagesPerTrigger"),
        ({**BASE, "commitOffsets": "true", "consumerGroup": "g"}, False, "commitOffsets"),
        ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
        ({**BASE, "endingTimestamp": "5"}, True, "endingTimestamp"),
        ({**BASE, "commitOffsets": "true"}, True, "commitOffsets"),
        (
            {**BASE, "startingOffsets": "earliest", "startingTimestamp": "5"},
            True,
            "startingOffsets",
        ),
        ({**BASE, "tagExpression": "A", "sqlFilter": "a = 1"}, False, "sqlFilter"),
    ],
)
def test_bad_combinations_name_the_option(
    options: dict[str, str], streaming: bool, named: str
) -> None:
    with pytest.raises(ConfigError, match=f"option '{named}'"):
        parse_read_options(options, streaming=streaming)


def test_fixed_schema() -> None:
    check_schema(SCHEMA)
    relaxed = StructType([StructField(f.name, f.dataType, True) for f in SCHEMA.fields])
    check_schema(relaxed)  # nullability may differ
    with pytest.raises(ConfigError, match="fixed schema"):
        check_schema(StructType(SCHEMA.fields[:-1]))


# ---- offsets JSON ---------------------------------------------------------------------------


def test_offsets_json_is_canonical() -> None:
    offsets = {
        QueueRef("b", "broker-a", 10): 1,
        QueueRef("b", "broker-a", 2): 2,
        QueueRef("a", "broker-b", 0): 3,
        QueueRef("a", "broker-a", 1): 4,
    }
    text = to_json(offsets)
    assert list(text) == ["a", "b"]
    assert list(text["a"]) == ["broker-a:1", "broker-b:0"]
    assert list(text["b"]) == ["broker-a:2", "broker-a:10"]  # numeric, not text, order
    assert from_json(text, what="x") == offsets


def test_checkpoint_offsets_are_strict() -> None:
    with pytest.raises(ConfigError, match=r"checkpointed offset.*≥ 0"):
        from_json({"t": {"broker-a:0": -1}}, what="checkpointed offset")
    with pytest.raises(ConfigError, match=r"checkpointed offset.*integer"):
        from_json({"t": {"broker-a:0": True}}, what="checkpointed offset")
    assert from_json('{"t": {"host:with:colons:3": 7}}', what="x") == {
        QueueRef("t", "host:with:colons", 3): 7
    }


# ---- budget split ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backlog", "budget", "expected"),
    [
        ({"a": 90, "b": 10}, 10, {"a": 9, "b": 1}),
        ({"a": 5, "b": 5, "c": 5}, 4, {"a": 2, "b": 1, "c": 1}),
        ({"a": 3, "b": 0}, 100, {"a": 3, "b": 0}),
        ({"a": 1, "b": 1000}, 10, {"a": 0, "b": 10}),
        ({"a": 1, "b": 1}, 1, {"a": 1, "b": 0}),
        ({}, 5, {}),
        ({"a": 7}, 0, {"a": 0}),
    ],
)
def test_split_budget_table(backlog: dict[str, int], budget: int, expected: dict[str, int]) -> None:
    assert split_budget(backlog, budget) == expected


@given(
    st.dictionaries(st.integers(0, 20), st.integers(0, 10_000), max_size=12), st.integers(0, 50_000)
)
def test_split_budget_properties(backlog: dict[int, int], budget: int) -> None:
    shares = split_budget(backlog, budget)
    assert set(shares) == set(backlog)
    assert sum(shares.values()) == min(budget, sum(backlog.values()))
    assert all(0 <= shares[k] <= backlog[k] for k in backlog)
    assert split_budget(backlog, budget) == shares  # deterministic


# ---- Kafka's names, unknown names, the offset options of issue 17 ---------------------------


def test_kafka_aliases_mean_our_options() -> None:
    opts = parse_read_options(
        {
            "endpoints": "h:1",
            "subscribe": "a,b",
            "maxOffsetsPerTrigger": "10",
            "minOffsetsPerTrigger": "4",
            "maxTriggerDelay": "30s",
            "maxRecordsPerPartition": "100",
        },
        streaming=True,
    )
    assert opts.topics == ("a", "b")
    assert (opts.max_messages_per_trigger, opts.min_messages_per_trigger) == (10, 4)
    assert (opts.max_trigger_delay_ms, opts.max_messages_per_partition) == (30_000, 100)
    pattern = parse_read_options({"endpoints": "h:1", "subscribePattern": "o.*"}, streaming=False)
    assert pattern.topic_pattern == "o.*" and pattern.matches_topic("orders")
    # Spark lower-cases names; an alias and our name with the same value are one option
    same = stream(maxoffsetspertrigger="7", maxMessagesPerTrigger="7")
    assert same.max_messages_per_trigger == 7


def test_alias_conflicts_and_bad_values_name_the_alias() -> None:
    with pytest.raises(ConfigError, match=r"option 'maxOffsetsPerTrigger'.*different values"):
        stream(maxMessagesPerTrigger="5", maxOffsetsPerTrigger="6")
    with pytest.raises(ConfigError, match=r"option 'subscribe'.*topics.*different values"):
        parse_read_options({"endpoints": "h:1", "subscribe": "a", "topics": "b"}, streaming=False)
    with pytest.raises(ConfigError, match=r"option 'maxOffsetsPerTrigger': must be a positive"):
        stream(maxOffsetsPerTrigger="0")
    with pytest.raises(ConfigError, match=r"'subscribe'.*exactly one is required"):
        batch(subscribe="a,b")  # with BASE's topic


@pytest.mark.parametrize(
    ("written", "suggested"),
    [
        ("maxmessagespertriger", "maxMessagesPerTrigger"),  # as Spark passes it
        ("MaxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("startingOffsetByTimestamp", "startingOffsetsByTimestamp"),
        ("subscribePatern", "subscribePattern"),
    ],
)
def test_unknown_option_is_named_as_written_with_a_suggestion(written: str, suggested: str) -> None:
    with pytest.raises(ConfigError) as info:
        stream(**{written: "5"})
    message = str(info.value)
    assert message.startswith(f"option {written!r}: unknown option")
    assert f"did you mean {suggested!r}?" in message


def test_unknown_option_far_from_any_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        batch(colour="red")
    assert "did you mean" not in str(info.value) and "known options are" in str(info.value)


def test_assign_parses_queues_and_excludes_subscriptions() -> None:
    opts = parse_read_options(
        {"endpoints": "h:1", "assign": '{"o": ["broker-a:0", "broker-a:3"], "p": ["b:1"]}'},
        streaming=True,
    )
    assert opts.assigned == {
        QueueRef("o", "broker-a", 0),
        QueueRef("o", "broker-a", 3),
        QueueRef("p", "b", 1),
    }
    assert opts.topics == ("o", "p")
    assert opts.reads_queue(QueueRef("o", "broker-a", 3))
    assert not opts.reads_queue(QueueRef("o", "broker-a", 1))
    with pytest.raises(ConfigError, match=r"'assign'.*exactly one"):
        batch(assign='{"orders": ["broker-a:0"]}')


def test_timestamp_offsets_and_strategy() -> None:
    by_time = batch(
        startingOffsetsByTimestamp='{"orders": {"broker-a:1": 1700000000000}}',
        endingOffsetsByTimestamp='{"orders": {"broker-a:0": 1800000000000}}',
    )
    assert by_time.starting.kind == "timestamps" and by_time.starting.past_end == "error"
    assert by_time.starting.offsets == {QueueRef("orders", "broker-a", 1): 1_700_000_000_000}
    assert by_time.ending.kind == "timestamps"
    assert by_time.ending.offsets == {QueueRef("orders", "broker-a", 0): 1_800_000_000_000}
    assert stream(startingTimestamp="5").starting.past_end == "latest"  # as before
    strict = stream(startingTimestamp="5", startingOffsetsByTimestampStrategy="ERROR")
    assert strict.starting.past_end == "error"
    lenient = stream(
        startingOffsetsByTimestamp='{"orders": {"broker-a:0": 5}}',
        startingOffsetsByTimestampStrategy="latest",
    )
    assert lenient.starting.past_end == "latest"
    with pytest.raises(ConfigError, match=r"'startingOffsetsByTimestampStrategy'.*only applies"):
        stream(startingOffsetsByTimestampStrategy="latest")
    with pytest.raises(ConfigError, match=r"'startingOffsets'.*give only one of"):
        batch(startingOffsets="earliest", startingOffsetsByTimestamp='{"orders": {"a:0": 5}}')
    with pytest.raises(ConfigError, match=r"'endingOffsetsByTimestamp'.*batch reads only"):
        stream(endingOffsetsByTimestamp='{"orders": {"a:0": 5}}')


def test_group_start() -> None:
    opts = stream(startingOffsets="group", consumerGroup="GID_app")
    assert (opts.starting.kind, opts.starting.group) == ("group", "GID_app")
    assert opts.starting.group_fallback == "earliest"
    latest = batch(startingOffsets="GROUP", consumerGroup="GID_app", groupFallback="latest")
    assert latest.starting.group_fallback == "latest"
    with pytest.raises(ConfigError, match=r"'startingOffsets'.*needs consumerGroup"):
        stream(startingOffsets="group")
    with pytest.raises(ConfigError, match=r"'groupFallback'.*only applies"):
        stream(groupFallback="latest")
    with pytest.raises(ConfigError, match=r"'endingOffsets'"):
        batch(endingOffsets="group", consumerGroup="GID_app")


def test_partition_options() -> None:
    opts = batch(minPartitions="8", maxMessagesPerPartition="1000")
    assert (opts.min_partitions, opts.max_messages_per_partition) == (8, 1000)
    assert stream(minPartitions="3").min_partitions == 3


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "max_per", "expected"),
    [
        ([100, 10], None, None, [1, 1]),
        ([100, 10], 5, None, [5, 1]),
        ([100, 10], None, 30, [4, 1]),
        ([100, 10], 2, None, [1, 1]),  # already enough
        ([3, 0], 10, None, [3, 1]),  # never more pieces than offsets
        ([10, 10], 3, 100, [2, 1]),
    ],
)
def test_split_counts_table(
    sizes: list[int], min_partitions: int | None, max_per: int | None, expected: list[int]
) -> None:
    got = split_counts(sizes, min_partitions=min_partitions, max_per_partition=max_per)
    assert got == expected


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 500)), max_size=8),
    st.none() | st.integers(1, 64),
    st.none() | st.integers(1, 200),
)
@example([(0, 0), (0, 2)], 2, None)  # an empty queue's range must not count as a partition
def test_split_ranges_read_each_offset_once(
    ranges: list[tuple[int, int]], min_partitions: int | None, max_per: int | None
) -> None:
    sizes = [size for _, size in ranges]
    counts = split_counts(sizes, min_partitions=min_partitions, max_per_partition=max_per)
    pieces = []
    for (start, size), count in zip(ranges, counts, strict=True):
        cut = piece_bounds(start, start + size, count)
        assert [o for low, high in cut for o in range(low, high)] == list(
            range(start, start + size)
        )
        assert all(high - low <= (max_per or size) for low, high in cut)
        pieces.extend(cut)
    if min_partitions is not None and sum(sizes) >= min_partitions:
        assert len([p for p in pieces if p[1] > p[0]]) >= min_partitions


def test_one_option_twice_in_different_case_with_different_values() -> None:
    with pytest.raises(ConfigError, match=r"option 'topic': given twice"):
        parse_read_options({"endpoints": "h:1", "topic": "a", "TOPIC": "b"}, streaming=False)
