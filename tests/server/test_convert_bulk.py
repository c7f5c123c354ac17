"""The SendBulk converter's array check of id-only properties (``_ids_only``)."""

from __future__ import annotations

import pytest

from broker_core.errors import InvalidMessageIdError
from broker_core.protocol.bulk_send import BulkRequest, decode_request, encode_request
from broker_core.server.convert_bulk import Limits, _ids_only, to_column_batch


def _request(ids: list[str]) -> BulkRequest:
    frame = encode_request(
        "t",
        [b"x"] * len(ids),
        [f"UNIQ_KEY\x01{i}\x02".encode() for i in ids],
        born_timestamp_ms=1,
        born_host="10.0.0.1",
    )
    return decode_request(frame)


def test_plain_ids_and_ids_with_inner_spaces_pass_the_array_check() -> None:
    assert _ids_only(_request(["A1", "B 2", " C3"])) == ["A1", "B 2", " C3"]


@pytest.mark.parametrize("blank", [" ", "\t \x1f", "\x0b\x0c"])
def test_an_id_of_blanks_alone_is_refused_whole(blank: str) -> None:
    req = _request(["A1", blank, "C3"])
    assert _ids_only(req) is None  # the per-message check then names it
    with pytest.raises(InvalidMessageIdError, match="message 1"):
        to_column_batch(req, limits=Limits(1024, 1024), peer=("10.0.0.2", 1), now_ms=1)
