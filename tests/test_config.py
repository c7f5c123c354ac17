from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.config import BrokerConfig, FlushMode, StoreConfig, load_config
from broker_core.errors import ConfigError


def test_toml_is_loaded_and_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('[broker]\nbroker_name = "b1"\n[store]\nflush_mode = "sync"\n'
                    "segment_size_bytes = 8388608\n")  # fmt: skip
    broker, store = load_config(path, store_dir=str(tmp_path / "s"))
    assert broker.broker_name == "b1"
    assert store.flush_mode is FlushMode.SYNC and store.segment_size_bytes == 8 << 20
    assert store.store_dir == str(tmp_path / "s")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[store]\nflush_mod = 'sync'\n", "unknown config key.*flush_mod"),
        ("[stor]\n", "unknown config table"),
        ("[store]\nflush_mode = 'sometimes'\n", "flush_mode must be"),
        ("[store]\nsegment_size_bytes = 100\n", "segment_size_bytes"),
        ("[broker]\nendpoint = 'nohost'\n", "endpoint must be host:port"),
        ("[broker]\ndefault_queue_nums = 0\n", "default_queue_nums"),
        ("this is not toml", "cannot read config file"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_defaults_are_valid() -> None:
    assert StoreConfig().segment_size_bytes == 1 << 30
    assert BrokerConfig().endpoint == "127.0.0.1:8081"
