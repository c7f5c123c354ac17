"""Tests for retry backoff, DLQ decisions, delay levels and retry/DLQ topic names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.broker.retry import (
    DELAY_LEVELS,
    DELAY_LEVELS_MS,
    CustomBackoff,
    DeadLetter,
    DelayLevelBackoff,
    ExponentialBackoff,
    Retry,
    RetryPolicy,
    delay_level_ms,
    dlq_topic,
    group_of_retry_topic,
    is_dlq_topic,
    is_retry_topic,
    next_delivery,
    parse_backoff,
    parse_duration_ms,
    retry_topic,
    schedule_queue_id,
)
from broker_core.errors import ConfigError, InvalidArgumentError, InvalidTopicError

S, M, H = 1_000, 60_000, 3_600_000
NOW = 1_700_000_000_000
FAST = settings(max_examples=200, deadline=None)

# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", 500),
        ("10s", 10 * S),
        ("1m", M),
        ("2h", 2 * H),
        ("1d", 24 * H),
        ("1.5s", 1500),
        ("0s", 0),
        ("0.25m", 15 * S),
        (" 3S ", 3 * S),
        ("1.000ms", 1),
    ],
)
def test_parse_duration_ms(text: str, expected: int) -> None:
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "10", "s", "-1s", "1.5ms", "1 s", "1sec", "1.s", ".5s", "1e3ms", "1s5", "٣s", "10x"],
)
def test_parse_duration_ms_rejects(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="duration"):
        parse_duration_ms(text)


def test_parse_duration_ms_rejects_non_string() -> None:
    with pytest.raises(InvalidArgumentError):
        parse_duration_ms(10)  # type: ignore[arg-type]


def test_parse_backoff() -> None:
    assert parse_backoff("1s,5s,10s") == (1000, 5000, 10000)
    assert parse_backoff(" 500ms , 1m ") == (500, M)


@pytest.mark.parametrize("text", ["", "  ", "1s,,5s", "1s,", "1s;5s"])
def test_parse_backoff_rejects(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_backoff(text)


# --------------------------------------------------------------------------- delay levels


def test_delay_level_table() -> None:
    assert len(DELAY_LEVELS) == 18
    assert " ".join(DELAY_LEVELS) == "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert DELAY_LEVELS_MS[0] == S and DELAY_LEVELS_MS[-1] == 2 * H
    assert list(DELAY_LEVELS_MS) == sorted(DELAY_LEVELS_MS)


@pytest.mark.parametrize(
    ("level", "ms", "queue_id"),
    [(1, S, 0), (2, 5 * S, 1), (3, 10 * S, 2), (5, M, 4), (14, 10 * M, 13), (18, 2 * H, 17)],
)
def test_delay_level_ms_and_queue(level: int, ms: int, queue_id: int) -> None:
    assert delay_level_ms(level) == ms
    assert schedule_queue_id(level) == queue_id


@pytest.mark.parametrize("level", [0, 19, -1, True, 1.0])
def test_delay_level_out_of_range(level: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        delay_level_ms(level)
    with pytest.raises(InvalidArgumentError):
        schedule_queue_id(level)


# --------------------------------------------------------------------------- backoffs


@pytest.mark.parametrize(
    ("retry", "level", "ms"),
    [(1, 3, 10 * S), (2, 4, 30 * S), (3, 5, M), (4, 6, 2 * M), (14, 16, 30 * M), (15, 17, H)],
)
def test_delay_level_backoff(retry: int, level: int, ms: int) -> None:
    backoff = DelayLevelBackoff()
    assert backoff.level_for_retry(retry) == level
    assert backoff.delay_ms(retry) == ms


@pytest.mark.parametrize("retry", [16, 17, 100, 1000])
def test_delay_level_backoff_caps_at_two_hours(retry: int) -> None:
    assert DelayLevelBackoff().level_for_retry(retry) == 18
    assert DelayLevelBackoff().delay_ms(retry) == 2 * H


@pytest.mark.parametrize(
    ("retry", "ms"), [(1, 1000), (2, 5000), (3, 10000), (4, 10000), (99, 10000)]
)
def test_custom_backoff_repeats_last(retry: int, ms: int) -> None:
    assert CustomBackoff((1000, 5000, 10000)).delay_ms(retry) == ms


@pytest.mark.parametrize(
    ("retry", "ms"), [(1, 1000), (2, 2000), (3, 4000), (6, 32000), (7, 60000), (1000, 60000)]
)
def test_exponential_backoff(retry: int, ms: int) -> None:
    assert ExponentialBackoff(1000, 2.0, 60000).delay_ms(retry) == ms


def test_exponential_backoff_huge_exponent_does_not_overflow() -> None:
    assert ExponentialBackoff(1, 100.0, 5000).delay_ms(10_000) == 5000


def test_exponential_backoff_fractional_multiplier_rounds() -> None:
    assert [ExponentialBackoff(1000, 1.5, 10_000).delay_ms(k) for k in (1, 2, 3, 4)] == [
        1000,
        1500,
        2250,
        3375,
    ]


@pytest.mark.parametrize(
    "backoff", [DelayLevelBackoff(), CustomBackoff((1,)), ExponentialBackoff(1, 1.0, 1)]
)
@pytest.mark.parametrize("retry", [0, -1, True])
def test_backoff_rejects_bad_retry_number(backoff: Any, retry: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        backoff.delay_ms(retry)


@pytest.mark.parametrize(
    "delays", [(), (-1,), (1.5,), (True,), "1s", (8 * 24 * H,), tuple(range(1001))]
)
def test_custom_backoff_validation(delays: Any) -> None:
    with pytest.raises(ConfigError):
        CustomBackoff(delays)


@pytest.mark.parametrize(
    ("initial", "multiplier", "maximum"),
    [
        (0, 2.0, 10),
        (10, 2.0, 5),
        (10, 0.5, 100),
        (10, float("inf"), 100),
        (10, float("nan"), 100),
        (10, 101.0, 100),
        (10, "2", 100),
        (1.5, 2.0, 100),
        (10, 2.0, 8 * 24 * H),
    ],
)
def test_exponential_backoff_validation(initial: Any, multiplier: Any, maximum: Any) -> None:
    with pytest.raises(ConfigError):
        ExponentialBackoff(initial, multiplier, maximum)


# --------------------------------------------------------------------------- policy


def test_policy_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_retries == 16
    assert policy.backoff == DelayLevelBackoff()
    assert RetryPolicy.default() == policy


def test_policy_constructors() -> None:
    assert RetryPolicy.custom("1s,5s", max_retries=3).backoff == CustomBackoff((1000, 5000))
    assert RetryPolicy.custom([1000, 5000]) == RetryPolicy(16, CustomBackoff((1000, 5000)))
    exp = RetryPolicy.exponential(100, 2, 1000, max_retries=5)
    assert exp == RetryPolicy(5, ExponentialBackoff(100, 2.0, 1000))


@pytest.mark.parametrize("max_retries", [-1, 1001, True, 1.0, "3"])
def test_policy_rejects_bad_max_retries(max_retries: Any) -> None:
    with pytest.raises(ConfigError, match="max_retries"):
        RetryPolicy(max_retries)


def test_policy_rejects_unknown_backoff() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(3, "exponential")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(),
        RetryPolicy.default(0),
        RetryPolicy.custom("1s,5s,10s", max_retries=1000),
        RetryPolicy.exponential(250, 1.5, 60_000, max_retries=7),
    ],
)
def test_policy_json_round_trip(policy: RetryPolicy) -> None:
    assert RetryPolicy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


def test_policy_to_dict_shape() -> None:
    assert RetryPolicy.exponential(100, 2, 1000, 5).to_dict() == {
        "max_retries": 5,
        "backoff": {"type": "exponential", "initial_ms": 100, "multiplier": 2.0, "max_ms": 1000},
    }
    assert RetryPolicy.custom([1, 2]).to_dict()["backoff"] == {
        "type": "custom",
        "delays_ms": [1, 2],
    }


def test_policy_from_dict_defaults_missing_keys() -> None:
    assert RetryPolicy.from_dict({}) == RetryPolicy()
    assert RetryPolicy.from_dict({"max_retries": 2}) == RetryPolicy(2)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"max_retries": 3, "extra": 1},
        {"backoff": {"type": "linear"}},
        {"backoff": {}},
        {"backoff": "delay_level"},
        {"backoff": {"type": "delay_level", "delays_ms": [1]}},
        {"backoff": {"type": "custom"}},
        {"backoff": {"type": "custom", "delays_ms": ["1s"]}},
        {"backoff": {"type": "exponential", "initial_ms": 1, "multiplier": 2}},
        {"max_retries": "16"},
    ],
)
def test_policy_from_dict_rejects(data: Any) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy.from_dict(data)


# --------------------------------------------------------------------------- next_delivery

DEFAULT = RetryPolicy()


@pytest.mark.parametrize(
    ("policy", "attempt", "expected"),
    [
        (DEFAULT, 1, Retry(10 * S, NOW + 10 * S, 1, 3)),
        (DEFAULT, 2, Retry(30 * S, NOW + 30 * S, 2, 4)),
        (DEFAULT, 15, Retry(H, NOW + H, 15, 17)),
        (DEFAULT, 16, Retry(2 * H, NOW + 2 * H, 16, 18)),
        (DEFAULT, 17, DeadLetter()),
        (DEFAULT, 500, DeadLetter()),
        (RetryPolicy.default(0), 1, DeadLetter()),
        (RetryPolicy.default(1), 1, Retry(10 * S, NOW + 10 * S, 1, 3)),
        (RetryPolicy.default(1), 2, DeadLetter()),
        (RetryPolicy.custom("1s,5s", 3), 1, Retry(S, NOW + S, 1)),
        (RetryPolicy.custom("1s,5s", 3), 3, Retry(5 * S, NOW + 5 * S, 3)),
        (RetryPolicy.custom("1s,5s", 3), 4, DeadLetter()),
        (RetryPolicy.exponential(100, 3, 1000, 4), 3, Retry(900, NOW + 900, 3)),
        (RetryPolicy.exponential(100, 3, 1000, 4), 4, Retry(1000, NOW + 1000, 4)),
        (RetryPolicy.exponential(100, 3, 1000, 4), 5, DeadLetter()),
    ],
)
def test_next_delivery_table(policy: RetryPolicy, attempt: int, expected: object) -> None:
    assert next_delivery(policy, attempt, NOW) == expected


@pytest.mark.parametrize(("attempt", "now"), [(0, NOW), (-1, NOW), (True, NOW), (1, -1), (1, 1.0)])
def test_next_delivery_rejects(attempt: Any, now: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        next_delivery(DEFAULT, attempt, now)


@FAST
@given(
    max_retries=st.integers(0, 1000),
    attempt=st.integers(1, 1200),
    now=st.integers(0, 2**50),
)
def test_next_delivery_boundary_property(max_retries: int, attempt: int, now: int) -> None:
    decision = next_delivery(RetryPolicy.default(max_retries), attempt, now)
    if attempt > max_retries:
        assert decision == DeadLetter()
    else:
        assert isinstance(decision, Retry)
        assert decision.reconsume_times == attempt
        assert decision.deliver_at_ms == now + decision.delay_ms
        assert 10 * S <= decision.delay_ms <= 2 * H


# --------------------------------------------------------------------------- topics


def test_retry_and_dlq_topics() -> None:
    assert retry_topic("GID_a") == "%RETRY%GID_a"
    assert dlq_topic("GID_a") == "%DLQ%GID_a"
    assert group_of_retry_topic(retry_topic("GID_a")) == "GID_a"


@pytest.mark.parametrize(
    ("topic", "is_retry", "is_dlq"),
    [
        ("%RETRY%g", True, False),
        ("%DLQ%g", False, True),
        ("%RETRY%", False, False),
        ("%DLQ%", False, False),
        ("TopicA", False, False),
        ("x%RETRY%g", False, False),
    ],
)
def test_topic_predicates(topic: str, is_retry: bool, is_dlq: bool) -> None:
    assert is_retry_topic(topic) is is_retry
    assert is_dlq_topic(topic) is is_dlq


@pytest.mark.parametrize("topic", ["TopicA", "%RETRY%", "%DLQ%g"])
def test_group_of_retry_topic_rejects(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        group_of_retry_topic(topic)


@pytest.mark.parametrize("group", ["", None])
def test_topic_builders_reject_empty_group(group: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        retry_topic(group)
    with pytest.raises(InvalidArgumentError):
        dlq_topic(group)
