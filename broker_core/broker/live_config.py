"""The broker settings an administrator may read and change while it runs
(``GetBrokerConfig`` / ``UpdateBrokerConfig``, mqadmin getBrokerConfig/updateBrokerConfig).

Only keys that every path reads at each request can change live:

====================  =======  ==============================================================
key                   type     takes effect
====================  =======  ==============================================================
auto_create_topics    bool     the next send to an unknown topic
auto_create_groups    bool     the next call naming an unknown group
max_long_polling_ms   int ≥ 0  the next long poll (receives, pulls, the clients' settings)
trace_broker          string   at once: what was taken under the old setting is written,
                               then "off" stops the broker's own records, "all" or a ratio
                               starts them (``trace_topics`` / ``trace_groups`` stay)
dedup_window_ms       int ≥ 0  at once: the dedup window is rebuilt from the commitlog for
                               its new length (sends wait for it: about 5 s for each million
                               units of log in the window); 0 turns idempotent sends off and
                               frees the window
====================  =======  ==============================================================

Every other key is fixed for the broker's life (it sized a table, started a thread or
named a file); changing it is refused, naming the keys that can change. A live change is
not written to the config file: a restart takes the file's value again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from broker_core.config import trace_ratio
from broker_core.errors import ConfigError, InvalidArgumentError

if TYPE_CHECKING:
    from broker_core.broker.broker import Broker

_TRUE: Final = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() not in _TRUE:
        raise InvalidArgumentError(f"expected true or false, got {value!r}")
    return _TRUE[str(value).lower()]


def _millis(value: Any) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise InvalidArgumentError(
            f"expected milliseconds (an integer ≥ 0), got {value!r}"
        ) from None
    if number < 0:
        raise InvalidArgumentError(f"expected milliseconds (an integer ≥ 0), got {value!r}")
    return number


def _trace(value: Any) -> str:
    text = str(value).strip().lower()
    try:
        trace_ratio(text)
    except ConfigError as exc:
        raise InvalidArgumentError(str(exc)) from None
    return text


LIVE_KEYS: Final[dict[str, Callable[[Any], Any]]] = {
    "auto_create_topics": _bool,
    "auto_create_groups": _bool,
    "max_long_polling_ms": _millis,
    "trace_broker": _trace,
    "dedup_window_ms": _millis,
}


def parse_live(key: str, value: Any) -> Any:
    """``value`` as ``key``'s type (pure); InvalidArgumentError for a key that cannot
    change live (naming those that can) or a bad value."""
    parse = LIVE_KEYS.get(key)
    if parse is None:
        raise InvalidArgumentError(
            f"{key!r} cannot change while the broker runs; keys that can: {', '.join(LIVE_KEYS)}"
        )
    try:
        return parse(value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{key}: {exc}") from None


def current(broker: Broker) -> dict[str, Any]:
    """Every broker setting now, JSON-ready."""
    config = broker.config
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def update(broker: Broker, key: str, value: Any) -> tuple[Any, Any]:
    """Set ``key`` to ``value`` now; (old, new)."""
    new = parse_live(key, value)
    old = getattr(broker.config, key)
    broker.config = dataclasses.replace(broker.config, **{key: new})
    if key == "auto_create_topics":
        broker.topics.auto_create = new
    elif key == "auto_create_groups":
        broker.groups.auto_create = new
    elif key == "trace_broker":
        broker.trace.reselect(new)
    elif key == "dedup_window_ms":
        broker.resize_dedup_window(new)
    return old, new
