"""The property codec: one module spells the separators, and its forms agree.

The separator check reads every product module's syntax tree (as the layer test does)
and fails on a string or bytes literal holding 0x01 or 0x02 outside
``protocol/property_codec.py`` (docstrings, which draw the format, are prose).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from broker_core.errors import (
    InvalidMessageIdError,
    InvalidPropertyError,
    InvalidTagError,
    MessageCorruptedError,
)
from broker_core.protocol import property_codec as codec
from broker_core.protocol.message_rules import MAX_MESSAGE_ID_CHARS, check_encoded
from tests.protocol.test_layers import ROOT

PRODUCT = ("broker_core", "connector", "spark_jobs", "pyspark_rocketmq")
HOME = "broker_core/protocol/property_codec.py"
SEPARATORS = ("\x01", "\x02")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def separator_literals(root: Path = ROOT) -> list[str]:
    """``path:line`` of each literal holding a separator outside the codec's module."""
    found = []
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name == HOME:
                continue
            tree = ast.parse(path.read_text(), name)
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Constant) or id(node) in docs:
                    continue
                value = node.value
                if isinstance(value, bytes):
                    value = value.decode("latin-1")
                if isinstance(value, str) and any(sep in value for sep in SEPARATORS):
                    found.append(f"{name}:{node.lineno}")
    return found


def test_the_separators_are_spelled_in_one_module() -> None:
    assert separator_literals() == []


def test_the_check_finds_a_separator(tmp_path: Path) -> None:
    probe = tmp_path / "broker_core" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text('"""Doc: name\\x01value\\x02."""\nA = b"\\x00"\nB = f"{A}\\x02"\n')
    assert separator_literals(tmp_path) == ["broker_core/probe.py:3"]


# ---- scalar forms ------------------------------------------------------------------------


def test_encoders_agree() -> None:
    props = {"UNIQ_KEY": "ID1", "TAGS": "a", "KEYS": "k1 k2", "region": "eu"}
    sent = codec.encode_send("ID1", "a", ["k1", "k2"], {"region": "eu"})
    assert sent == codec.encode_properties(props) == codec.encode_text(props).encode()
    assert codec.decode_properties(sent) == props


def test_checked_encoder_refuses_separators() -> None:
    with pytest.raises(InvalidPropertyError):
        codec.encode_properties({"a" + codec.NAME_VALUE_SEP: "v"})
    with pytest.raises(InvalidPropertyError):
        codec.encode_properties({"a": "v" + codec.PROPERTY_SEP})


def test_decode_skips_entries_without_a_separator_as_java_does() -> None:
    text = "a" + codec.NAME_VALUE_SEP + "1" + codec.PROPERTY_SEP + "junk" + codec.PROPERTY_SEP
    assert codec.decode_text(text) == {"a": "1"}


def test_value_of_finds_whole_names_only() -> None:
    raw = codec.encode_text({"XKEYS": "no", "KEYS": "yes", "UNIQ_KEY": ""}).encode()
    assert codec.value_of(raw, codec.mark("KEYS")) == "yes"
    assert codec.value_of(raw, codec.mark("UNIQ_KEY")) == ""
    assert codec.value_of(raw, codec.mark("TAGS")) is None


# ---- array forms -------------------------------------------------------------------------


def _id_block(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [codec.encode_send(i, None, None, None) for i in ids]
    block = np.frombuffer(b"".join(encoded), np.uint8)
    return block, np.array([len(e) for e in encoded], np.int64)


def test_id_only_rows_round_trip() -> None:
    ids = np.frombuffer(b"AB01AB02", np.uint8).reshape(2, 4)
    rows = codec.id_only_rows(ids)
    assert rows.tobytes() == codec.encode_send("AB01", None, None, None) + codec.encode_send(
        "AB02", None, None, None
    )
    assert codec.ids_of_rows(rows, MAX_MESSAGE_ID_CHARS) == (
        ["AB01", "AB02"],
        rows.tobytes().decode(),
    )
    assert codec.split_terminated(rows[:, len(codec.ID_HEAD) :]) == ["AB01", "AB02"]


def test_ids_only_reads_ids_of_any_length_and_nothing_else() -> None:
    assert codec.ids_only(*_id_block(["a", "bcd", "x y"]), MAX_MESSAGE_ID_CHARS) == [
        "a",
        "bcd",
        "x y",
    ]
    assert codec.ids_only(*_id_block(["a", "   "]), MAX_MESSAGE_ID_CHARS) is None  # blank id
    assert codec.ids_only(*_id_block(["a", "b" * 9]), 8) is None  # too long
    with_tag = codec.encode_send("a", "t", None, None)
    block = np.frombuffer(with_tag, np.uint8)
    assert codec.ids_only(block, np.array([len(with_tag)]), MAX_MESSAGE_ID_CHARS) is None


# ---- the encoded form's rules (SendBulk) --------------------------------------------------


def test_check_encoded_returns_tag_and_index_keys() -> None:
    raw = codec.encode_send("ID1", "a", ["k1", "k2"], {"region": "eu"})
    assert check_encoded(raw, 0) == ("a", ["ID1", "k1", "k2"])


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"\xff", MessageCorruptedError),
        (codec.encode_text({"UNIQ_KEY": "a"}).encode()[:-1], InvalidPropertyError),
        (b"UNIQ_KEY" + codec.PROPERTY_SEP_BYTES, InvalidPropertyError),  # no name/value sep
        (codec.encode_text({"UNIQ_KEY": "a", "b": "\x00"}).encode(), InvalidPropertyError),
        (codec.encode_text({"TAGS": "a", "UNIQ_KEY": "b"}).encode(), InvalidMessageIdError),
        (codec.encode_send("a", "x|y", None, None), InvalidTagError),
        (codec.encode_send("a", None, None, {"DELAY": "3"}), InvalidPropertyError),
    ],
)
def test_check_encoded_refuses(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_encoded(raw, 3)
