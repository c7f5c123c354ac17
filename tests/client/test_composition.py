"""The client's shape: a facade over composed parts, errors with fields, one set of
permission bits. No broker needed."""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.client.admin_auth import AuthAdminCalls
from broker_core.client.broker_client import BrokerClient
from broker_core.client.errors import error_for
from broker_core.client.offsets import Offsets
from broker_core.client.producing import Producer
from broker_core.client.pulling import Puller
from broker_core.errors import InvalidArgumentError, InvalidOffsetError
from broker_core.protocol.perm import Perm
from broker_core.protocol.status import Code

ROOT = Path(__file__).resolve().parents[2]
PARTS = {"producer": Producer, "puller": Puller, "offsets": Offsets, "admin": AuthAdminCalls}


def _public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


@pytest.mark.parametrize("part", sorted(PARTS))
def test_the_facade_offers_every_method_of_the_parts_with_their_signatures(part: str) -> None:
    client = RocketMQClient("127.0.0.1:1")  # nothing connects
    cls = PARTS[part]
    names = _public(cls) | (_public(AuthAdminCalls.__mro__[1]) if part == "admin" else set())
    assert names, part
    for name in names:
        facade = getattr(client, name)
        # the part's own bound method (topic_status: the broker client's, with its fallback)
        owner = client.broker if name == "topic_status" else getattr(client.broker, part)
        assert facade.__self__ is owner
        assert inspect.signature(facade) == inspect.signature(getattr(owner, name))


def test_a_cluster_client_routes_sends_and_pulls_through_the_cluster_client() -> None:
    client = RocketMQClient(namesrv="127.0.0.1:1")
    assert client.cluster is not None and client.broker is None
    for name in ("send", "send_batch_async", "pull_columns", "query_offset", "flush"):
        assert getattr(client, name).__self__ is client.cluster
    copy = pickle.loads(pickle.dumps(client))
    assert copy.cluster is not None and copy.cluster.namesrv == "127.0.0.1:1"


def test_a_broker_client_holds_its_parts_on_one_transport() -> None:
    broker = BrokerClient("127.0.0.1:1", RocketMQClient("127.0.0.1:1").settings)
    assert broker.producer.transport is broker.transport is broker.puller.transport
    assert broker.puller.offsets is broker.offsets
    copy = pickle.loads(pickle.dumps(broker))
    assert copy.puller.transport is copy.transport  # still shared after pickling
    assert RocketMQClient.of(broker).broker is broker


def test_settings_are_checked_once_for_every_part() -> None:
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        RocketMQClient("127.0.0.1:1", max_in_flight=0)
    with pytest.raises(InvalidArgumentError, match="both access_key and secret_key"):
        RocketMQClient(namesrv="127.0.0.1:1", access_key="ak")
    assert "secret" not in repr(
        RocketMQClient("127.0.0.1:1", access_key="a", secret_key="s").settings
    )


def test_an_illegal_offset_carries_where_to_go_as_a_field() -> None:
    error = error_for(Code.ILLEGAL_OFFSET, "beyond the end", next_offset=42)
    assert isinstance(error, InvalidOffsetError) and error.next_offset == 42
    again = pickle.loads(pickle.dumps(error))  # Spark ships errors between processes
    assert (type(again), again.next_offset, str(again)) == (type(error), 42, str(error))
    assert InvalidOffsetError("negative").next_offset is None


def _perm_literals(path: Path) -> list[str]:
    """``NAME = 2|4|6`` assignments of a name that speaks of permission, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        value = getattr(node, "value", None)
        for target in targets:
            name = getattr(target, "id", "")
            if (
                "PERM" in name.upper()
                and isinstance(value, ast.Constant)
                and value.value in Perm.VALID
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_the_permission_bits_are_defined_once() -> None:
    perm_file = ROOT / "broker_core" / "protocol" / "perm.py"
    found = [
        hit
        for folder in ("broker_core", "connector", "spark_jobs")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != perm_file
        for hit in _perm_literals(path)
    ]
    assert found == []
    assert (Perm.WRITE, Perm.READ, Perm.READ_WRITE) == (2, 4, 6)
