"""The SendBulk converter's array check of id-only properties (``bulk_checks.ids_only``)."""

from __future__ import annotations

import numpy as np
import pytest

from broker_core.errors import InvalidMessageIdError
from broker_core.protocol.bulk_send import BulkRequest, decode_request, encode_request
from broker_core.protocol.unit import topic_head
from broker_core.server.bulk_checks import check_units, message_ids
from broker_core.server.convert_bulk import Limits, to_column_batch


def _request(ids: list[str]) -> BulkRequest:
    frame = encode_request(
        "t",
        [b"x"] * len(ids),
        [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids],
        born_timestamp_ms=1,
        born_host="10.0.0.1",
    )
    return decode_request(frame)


def _ids_only(req: BulkRequest) -> list[str] | None:
    data = np.frombuffer(req.units, np.uint8)
    units = check_units(
        data, req.sizes, topic_head(req.topic), max_body_bytes=64, max_properties_bytes=1024
    )
    found = message_ids(units)
    if found is None:
        return None
    ids, text = found
    assert text is None or text == "".join(f"UNIQ_KEY\x01{i}\x02" for i in ids)
    return ids


def test_plain_ids_and_ids_with_inner_spaces_pass_the_array_check() -> None:
    assert _ids_only(_request(["A1", "B 2", " C3"])) == ["A1", "B 2", " C3"]


def test_ids_of_several_lengths_are_gathered_in_order() -> None:
    ids = ["A", "BB" * 20, "C" * 7, "D"]
    assert _ids_only(_request(ids)) == ids


@pytest.mark.parametrize("blank", [" ", "\t \x1f", "\x0b\x0c"])
def test_an_id_of_blanks_alone_is_refused_whole(blank: str) -> None:
    req = _request(["A1", blank, "C3"])
    assert _ids_only(req) is None  # the per-message check then names it
    with pytest.raises(InvalidMessageIdError, match="message 1"):
        to_column_batch(req, limits=Limits(1024, 1024), peer=("10.0.0.2", 1), now_ms=1)


@pytest.mark.parametrize(
    ("ids", "taken"),
    [
        (["A1", "B2", "C3"], True),
        (["A1", "  ", "C3"], False),  # one length: the rows path; a blank id
        (["A1", "B\x01", "C3"], False),
        (["A1", "B\x02", "C3"], False),
        (["A1", "B\x00", "C3"], False),
        (["A1", "é", "C3"], False),  # 2 bytes of UTF-8: one length, not ASCII
        (["A1", "\x02\x01", "C3"], False),
        (["A1", "B 2", " C3"], True),  # lengths differ: the block path
    ],
)
def test_both_array_paths_agree_on_ids(ids: list[str], taken: bool) -> None:
    assert _ids_only(_request(ids)) == (ids if taken else None)
