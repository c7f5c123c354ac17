"""Fuzz every MessagingService RPC of one real broker process with bad requests.

Two kinds of input, for every RPC (Telemetry included):

* random bytes as the serialized request: gRPC itself refuses what does not parse
  (status INTERNAL, "Exception deserializing request!", the same in every gRPC
  implementation); what parses reaches the handler like any request;
* valid requests with 1..4 fields replaced by hostile values, built generically from the
  protobuf descriptors: empty, illegal and huge names, negative and extreme numbers,
  unknown enum values, oversized bodies, forged receipt handles, bad durations and
  timestamps, missing client ids.

Every answer must be a response whose statuses carry a defined v2 ``Code`` that is not
an internal error (a handler that fails on input is a bug: input errors have codes), or,
for unparsable bytes, that gRPC refusal. Afterwards the broker is alive, logged no
error, still serves what was stored before the fuzz byte for byte, takes a normal send
and pull, and, restarted, recovers without dropping anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.client import RocketMQClient
from tests.chaos import load
from tests.chaos.grpc_fuzz import (
    CONFIG,
    METHODS,
    SERVICE,
    Code,
    Target,
    assert_broker_sound,
    call_raw,
    check_answers,
    first_delivery,
    stop_cleanly,
    store_reference_data,
)
from tests.chaos.grpc_mutations import METADATA, mutate_message, templates
from tests.server.conftest import start_broker


def budgets(short: int, full: int) -> list[Any]:
    return load.budgets(short, full, suppress=list(HealthCheck))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    proc = start_broker(tmp_path_factory.mktemp("fuzz-grpc"), config=CONFIG)
    with RocketMQClient(proc.endpoint) as client:
        stored = store_reference_data(client)
    channel = grpc.insecure_channel(
        proc.endpoint,
        options=[
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_receive_message_length", 64 << 20),
        ],
    )
    handle, message_id = first_delivery(channel)
    yield Target(proc, channel, stored, handle, message_id)
    channel.close()
    if proc.process.poll() is None:
        stop_cleanly(proc)


# ---- the properties -----------------------------------------------------------------------


@pytest.mark.parametrize("budget", budgets(200, 6_000))
def test_random_bytes_are_refused_or_answered_with_a_code(target: Target, budget: settings) -> None:
    refusals = 0

    @budget
    @given(
        st.sampled_from(METHODS),
        st.binary(max_size=200),
        st.lists(st.binary(max_size=80), max_size=3),
        METADATA,
    )
    def check(
        method: str, payload: bytes, frames: list[bytes], metadata: list[tuple[str, str]]
    ) -> None:
        nonlocal refusals
        desc = SERVICE.methods_by_name[method]
        try:
            answers = call_raw(
                target, method, [payload, *frames] if desc.client_streaming else payload, metadata
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INTERNAL, (method, exc)
            assert "deserializing request" in (exc.details() or ""), (method, exc)
            refusals += 1
            return
        check_answers(method, answers)

    check()
    assert refusals > 0  # the random bytes did include undecodable requests
    assert_broker_sound(target)


@pytest.mark.parametrize("budget", budgets(300, 10_000))
def test_mutated_requests_get_a_proper_code(target: Target, budget: settings) -> None:
    base = templates(target)
    seen: dict[str, set[int]] = {}
    # Every method gets its share of the budget (a draw over all methods could leave one
    # out of a short run).
    share = settings(parent=budget, max_examples=max(5, budget.max_examples // len(METHODS)))

    def fuzz(method: str) -> None:
        @share
        @given(st.data(), METADATA)
        def check(data: st.DataObject, metadata: list[tuple[str, str]]) -> None:
            request = type(base[method])()
            request.CopyFrom(base[method])
            mutate_message(data.draw, request)
            payload = request.SerializeToString()
            frames = [
                payload,
                *([payload] if method == "Telemetry" and data.draw(st.booleans()) else []),
            ]
            codes = check_answers(
                method,
                call_raw(target, method, frames if method == "Telemetry" else payload, metadata),
            )
            seen.setdefault(method, set()).update(codes)

        check()

    for method in METHODS:
        fuzz(method)
    assert set(seen) == set(METHODS), sorted(set(METHODS) - set(seen))
    refused = {code for codes in seen.values() for code in codes} - {Code.OK}
    assert len(refused) >= 8, sorted(Code.Name(c) for c in refused)  # many distinct refusals
    assert_broker_sound(target)


def test_restart_after_the_fuzz_drops_nothing(target: Target, tmp_path: Path) -> None:
    """The store the fuzz ran against recovers cleanly and still holds the data."""
    stop_cleanly(target.proc)
    workdir = target.proc.store_dir.parent
    proc = start_broker(workdir, config=CONFIG)
    try:
        opened = [line for line in proc.output if "store opened:" in line]
        assert opened and "abnormal shutdown: False" in opened[0], opened
        assert "dropped" not in opened[0] and "rebuilt" not in opened[0], opened[0]
        target.proc = proc
        target.channel.close()
        target.channel = grpc.insecure_channel(proc.endpoint)
        assert_broker_sound(target)
    finally:
        stop_cleanly(proc)
