from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker_core.config import BrokerConfig, FlushMode, StoreConfig, load_config
from broker_core.config_reference import DESCRIPTIONS, SECTIONS, defaults_toml, markdown_table
from broker_core.errors import ConfigError


def test_toml_is_loaded_and_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        '[broker]\nbroker_name = "b1"\n[store]\nflush_mode = "sync"\nsegment_size_bytes = 8388608\n'
    )
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[store]\nsegment_size_bytes = 'big'\n",
            r"segment_size_bytes in \[store\] must be an integer, got 'big' \(str\)",
        ),
        (
            "[store]\nflush_interval_ms = 0.5\n",
            r"flush_interval_ms in \[store\] must be an integer",
        ),
        ("[store]\ndisk_full_ratio = '0.9'\n", r"disk_full_ratio in \[store\] must be a number"),
        ("[store]\nflush_mode = 1\n", r"flush_mode in \[store\] must be 'sync' or 'async'"),
        ("[broker]\nauto_create_topics = 1\n", r"auto_create_topics in \[broker\] must be true or"),
        (
            "[broker]\ndefault_queue_nums = true\n",
            r"default_queue_nums in \[broker\] must be an int",
        ),
        ("[broker]\nbroker_name = 7\n", r"broker_name in \[broker\] must be a string"),
        ("[broker]\nmax_pull_batch = [1]\n", r"max_pull_batch in \[broker\] must be an integer"),
        ("store = 5\n", r"store must be a table"),
    ],
)
def test_wrong_value_types_name_the_key_and_type(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_number_key_takes_an_integer(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text("[store]\nfile_reserved_hours = 5\n")
    assert load_config(path)[1].file_reserved_hours == 5


def test_every_key_is_described_and_the_defaults_file_loads_back(tmp_path: Path) -> None:
    for section, cls in SECTIONS.items():
        fields = [f.name for f in dataclasses.fields(cls)]
        assert sorted(DESCRIPTIONS[section]) == sorted(fields), f"describe every [{section}] key"
    path = tmp_path / "defaults.toml"
    path.write_text(defaults_toml())
    assert load_config(path) == (BrokerConfig(), StoreConfig())


def test_readme_lists_every_config_key() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert markdown_table() in readme, "paste config_reference.markdown_table() into README"


BAD_SERVICE_SETTINGS = [
    ("transaction_check_timeout_ms", 0),
    ("transaction_max_checks", -1),
    ("transaction_check_interval_ms", True),
    ("transaction_check_timeout_ms", 1.5),
    ("client_expiry_ms", 0),
    ("client_expiry_ms", True),
    ("pop_revive_interval_ms", 0),
    ("offsets_persist_interval_ms", 0),
]


@pytest.mark.parametrize(("key", "value"), BAD_SERVICE_SETTINGS)
def test_bad_service_settings_fail_at_load_naming_the_key(
    tmp_path: Path, key: str, value: object
) -> None:
    """Settings once checked by service constructors (TransactionService, ClientRegistry)."""
    with pytest.raises(ConfigError, match=key):
        BrokerConfig(**{key: value})  # type: ignore[arg-type]
    path = tmp_path / "bad.toml"
    toml_value = str(value).lower() if isinstance(value, bool) else str(value)
    path.write_text(f"[broker]\n{key} = {toml_value}\n")
    with pytest.raises(ConfigError, match=rf"{key}"):
        load_config(path)


STORE_POSITIVE = [
    "derived_flush_interval_ms",
    "cleanup_interval_ms",
    "max_dispatch_lag_bytes",
    "max_flush_lag_bytes",
]


@pytest.mark.parametrize("key", STORE_POSITIVE)
def test_store_intervals_and_lags_must_be_positive(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} must be ≥ 1, got 0"):
        StoreConfig(**{key: 0})  # type: ignore[arg-type]


def test_a_wrongly_typed_value_fails_when_built_in_python_too() -> None:
    with pytest.raises(ConfigError, match="config key flush_interval_ms must be an integer"):
        StoreConfig(flush_interval_ms="5")  # type: ignore[arg-type]
