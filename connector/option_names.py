"""Names of the source's read options: our spellings, Kafka's aliases, and unknown names.

Spark hands a Python data source its options with every name lower-cased (the JVM's
``CaseInsensitiveStringMap`` sends them so, and pyspark's ``CaseInsensitiveDict`` keeps
only the lower-cased key): the spelling a user typed never reaches the source. So an
error names an option in its documented spelling when it is known, and an unknown
option as Spark passed it, with the closest known name suggested.

Where Spark's Kafka source has an option with the same meaning, its name is accepted
as an alias of ours (:data:`ALIASES`). Giving an alias and our name with different
values is an error; equal values are accepted.

>>> canonical_names({"subscribe": "a,b", "maxoffsetspertrigger": "10"}).values
{'topics': 'a,b', 'maxMessagesPerTrigger': '10'}
>>> canonical_names({"subscribe": "a"}).written["topics"]
'subscribe'
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from broker_core.errors import ConfigError
from connector import credentials

OUR_NAMES: Final = (
    "endpoints",
    "namesrv",
    "topic",
    "topics",
    "topicPattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "groupFallback",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "minPartitions",
    "maxMessagesPerPartition",
    "tagExpression",
    "sqlFilter",
    "failOnDataLoss",
    "consumerGroup",
    "commitOffsets",
    "includeProperties",
    "trace",
    *credentials.OPTIONS,
)
KNOWN_OPTIONS: Final = {name.lower(): name for name in OUR_NAMES}

ALIASES: Final = {  # Spark's Kafka source name -> ours (same meaning)
    "subscribe": "topics",
    "subscribePattern": "topicPattern",
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "minOffsetsPerTrigger": "minMessagesPerTrigger",
    "maxRecordsPerPartition": "maxMessagesPerPartition",
}
_ALIAS_BY_LOWER: Final = {alias.lower(): alias for alias in ALIASES}


@dataclass(frozen=True)
class GivenOptions:
    """Options keyed by our documented names, and the name each was written as."""

    values: dict[str, str] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)  # our name -> alias used

    def as_written(self, exc: ConfigError) -> ConfigError:
        """``exc`` with every option given through an alias named as the alias."""
        text = str(exc)
        for ours, alias in self.written.items():
            text = text.replace(f"'{ours}'", f"'{alias}'")
        return ConfigError(text) if text != str(exc) else exc


def suggestion(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known name closest to ``name``, or ``""``."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def _unknown(key: str) -> ConfigError:
    known = [*OUR_NAMES, *ALIASES]
    hint = suggestion(key, known)
    spark_note = " (Spark passes option names lower-cased)" if key == key.lower() and hint else ""
    return ConfigError(
        f"option {key!r}: unknown option of the rocketmq source{hint}{spark_note}; known "
        f"options are {', '.join(OUR_NAMES)} and Kafka's names "
        f"{', '.join(f'{a} (= {o})' for a, o in ALIASES.items())}"
    )


def canonical_names(options: Mapping[str, str]) -> GivenOptions:
    """The options under our documented names; ConfigError for an unknown option, a
    missing value, or an alias and our name given with different values."""
    given = GivenOptions()
    for key, value in options.items():
        alias = _ALIAS_BY_LOWER.get(key.lower())
        name = ALIASES[alias] if alias else KNOWN_OPTIONS.get(key.lower())
        if name is None:
            raise _unknown(key)
        if value is None:
            raise ConfigError(f"option {alias or name!r}: must have a value")
        text = str(value)
        if name in given.values and given.values[name] != text:
            kafka = alias or given.written.get(name)
            if kafka is None:  # one name twice, spelled differently
                raise ConfigError(f"option {name!r}: given twice with different values")
            raise ConfigError(
                f"option {kafka!r}: {kafka} (Kafka's name) and {name} are the same option "
                f"but were given different values ({text!r} and {given.values[name]!r}); "
                f"give one of them"
            )
        given.values[name] = text
        if alias:
            given.written[name] = alias
    return given
