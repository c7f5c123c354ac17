"""``bench.echo_ceiling``: the grpcio echo server really answers the senders' calls."""

from __future__ import annotations

from bench import echo_ceiling


def test_echo_ceiling_counts_calls_and_times_their_round_trips() -> None:
    ceiling = echo_ceiling.measure(0.3, (1, 2), 128)
    assert ceiling.calls_s > 0  # calls were answered (how many a second is ./dev bench's)
    trips = ceiling.round_trip_ms
    assert 0 < trips["p50"] <= trips["p99"] <= trips["p999"] < 1000 * echo_ceiling.CALL_TIMEOUT_S
