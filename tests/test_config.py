from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core.auth.config import AuthConfig, load_security
from broker_core.cli import cli
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


# ---- one validation: the checker refuses what broker start refuses ----------------------------

REFUSED_FILES = [
    ("[auth]\nenable = true\n", ["[auth]", "enable"]),  # a typo of `enabled`
    ("[auth]\nenabled = true\n", ["super user"]),
    ("[auth]\nenabled = 1\n", ["enabled", "bool"]),
    ('[[auth.users]]\naccess_key = "a"\nsecret_key = "S"\n', ["auth.users", "6"]),
    ('[tls]\ncert_file = "server.pem"\n', ["[tls]", "key_file"]),
    ('[tls]\ncert_file = "c.pem"\nkey_file = "k.pem"\nrequire_client_cert = true\n', ["ca"]),
    ("auth = 3\n", ["auth must be a table"]),
]


@pytest.mark.parametrize(("text", "words"), REFUSED_FILES)
def test_the_config_checker_refuses_what_broker_start_refuses(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["broker", "config", "--config", str(path)])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error:") and all(w in line for w in words), line
    with pytest.raises(ConfigError) as refused:  # what `rmq broker start` reads first
        load_config(path)
    assert str(refused.value) in line


def test_broker_start_refuses_a_bad_auth_table_before_opening_the_store(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(REFUSED_FILES[0][0])
    store = tmp_path / "store"
    rmq = Path(sys.executable).with_name("rmq")
    args = ["broker", "start", "--listen", "127.0.0.1:0", "--store-dir", str(store)]
    done = subprocess.run(
        [str(rmq), *args, "--config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "enable" in done.stderr.strip().splitlines()[-1]
    assert not store.exists()


def test_defaults_show_auth_and_tls_and_load_back(tmp_path: Path) -> None:
    text = CliRunner().invoke(cli, ["broker", "config", "--defaults"]).stdout
    assert "[auth]" in text and "enabled = false" in text
    assert "# [tls]" in text and '# key_file = "server.key"' in text
    path = tmp_path / "defaults.toml"
    path.write_text(text)
    assert load_security(path) == (AuthConfig(), None)
    assert load_config(path) == (BrokerConfig(), StoreConfig())


def test_the_checker_prints_auth_and_tls_without_secrets(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        '[auth]\nenabled = true\n[[auth.users]]\naccess_key = "admin"\n'
        'secret_key = "hunter22"\nsuperuser = true\n'
        '[tls]\ncert_file = "server.pem"\nkey_file = "server.key"\n'
    )
    result = CliRunner().invoke(cli, ["broker", "config", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "enabled = true" in result.stdout and 'access_key = "admin"' in result.stdout
    assert 'key_file = "server.key"' in result.stdout
    assert "hunter22" not in result.stdout
