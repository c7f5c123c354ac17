"""accessKey/secretKey/tls/caFile options: parsed for source and sink, carried into every
partition and client, and the secret never shown."""

from __future__ import annotations

import pickle

import pytest

from broker_core.errors import ConfigError
from connector.brokers import BrokerSet
from connector.credentials import NO_ACCESS, Access, parse_access
from connector.options import parse_read_options
from connector.sink import _client
from connector.sink_options import parse_sink_options

KEYS = {"accessKey": "alice", "secretKey": "s3cr3t-value"}


def test_read_and_sink_options_carry_the_keys_without_showing_the_secret() -> None:
    read = parse_read_options({"endpoints": "127.0.0.1:1", "topic": "t", **KEYS}, streaming=False)
    sink = parse_sink_options(
        {
            "endpoints": "127.0.0.1:1",
            "topic": "t",
            "accesskey": "alice",
            "secretkey": "s3cr3t-value",
        }
    )
    for access in (read.access, sink.access):
        assert access == Access("alice", "s3cr3t-value")
    for shown in (repr(read), repr(sink), str(read.access)):
        assert "s3cr3t-value" not in shown
    client = _client(sink)
    assert "s3cr3t-value" not in repr(client)
    signed = dict(client.broker.transport.metadata())
    assert signed["authorization"].startswith("MQv2-HMAC-SHA1 Credential=alice,")
    brokers = pickle.loads(pickle.dumps(BrokerSet(["127.0.0.1:1"], read.access)))
    assert brokers.access == read.access


def test_without_keys_nothing_is_signed() -> None:
    read = parse_read_options({"endpoints": "127.0.0.1:1", "topic": "t"}, streaming=False)
    assert read.access == NO_ACCESS
    assert "authorization" not in dict(
        _client(
            parse_sink_options({"endpoints": "127.0.0.1:1", "topic": "t"})
        ).broker.transport.metadata()
    )


def test_errors_never_quote_the_secret() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_access({"secretKey": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(caught.value) and "'secretKey'" in str(caught.value)
    assert parse_access({"tls": "TRUE"}).tls
