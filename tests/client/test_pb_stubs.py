"""The protobuf stubs mypy checks against (``typings/``) match the installed package."""

from __future__ import annotations

from tests.client.pb_stubs import TYPINGS, generate


def test_stubs_are_current() -> None:
    stubs = generate()
    assert "class Message(_message.Message):" in stubs["rocketmq/grpc_protocol/definition_pb2.pyi"]
    stale = [path for path, text in stubs.items() if (TYPINGS / path).read_text() != text]
    assert not stale, f"regenerate with: .venv/bin/python -m tests.client.pb_stubs ({stale})"


def test_enum_arguments_take_ints() -> None:
    definition = generate()["rocketmq/grpc_protocol/definition_pb2.pyi"]
    assert "code: _Optional[_Union[Code, str, int]]" in definition
