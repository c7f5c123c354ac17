"""Message filters: tag expressions, and the facade that also covers SQL92.

A subscription names an expression type and an expression. For ``TAG`` the expression is
``*`` (everything) or tags joined by ``||``; consume-queue units store each message's
:func:`~broker_core.message.tag_hash`, so :meth:`MessageFilter.matches_hash` skips units
cheaply and :meth:`MessageFilter.matches` confirms with the real tag (hashes can
collide). For ``SQL92`` the hash check always passes and the expression is evaluated on
the message properties, with the tag visible as the property ``TAGS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from broker_core.errors import FilterSyntaxError
from broker_core.message import PROPERTY_TAGS, tag_hash
from broker_core.protocol.sql92 import SqlFilter, compile_sql

TAG = "TAG"
SQL92 = "SQL92"
SUBSCRIBE_ALL = "*"
TAG_SEPARATOR = "||"


def _tag_error(expr: str, pos: int, problem: str) -> FilterSyntaxError:
    return FilterSyntaxError(f"tag filter: {problem} at position {pos + 1} in '{expr}'")


class TagFilter:
    """``*`` or ``TagA || TagB``: which tags a subscription accepts."""

    __slots__ = ("codes", "expression", "match_all", "tags")

    def __init__(self, tags: Iterable[str] | None = None, expression: str | None = None) -> None:
        """``tags=None`` accepts every message; otherwise exactly the tags given."""
        self.match_all = tags is None
        self.tags: frozenset[str] = frozenset(tags or ())
        if not self.match_all and (not self.tags or "" in self.tags):
            raise FilterSyntaxError("tag filter: tags must be non-empty strings")
        self.codes = frozenset(tag_hash(tag) for tag in self.tags)
        self.expression = expression or TAG_SEPARATOR.join(sorted(self.tags)) or SUBSCRIBE_ALL

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """Parse ``*``, empty or None (everything) or ``TagA || TagB``."""
        text = expression or ""
        if text.strip() in ("", SUBSCRIBE_ALL):
            return cls(None, SUBSCRIBE_ALL)
        return cls(_split_tags(text), text)

    def matches_hash(self, code: int) -> bool:
        """Pre-check with the stored tag hash; may pass a colliding tag, never drops one."""
        return self.match_all or code in self.codes

    def matches(self, tag: str | None) -> bool:
        """Confirm with the real tag; a message without a tag matches only ``*``."""
        return self.match_all or (tag is not None and tag in self.tags)

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"


def _split_tags(text: str) -> list[str]:
    """The tags in ``text``, trimmed; errors name the position of the bad part."""
    tags: list[str] = []
    start = 0
    for part in text.split(TAG_SEPARATOR):
        tag = part.strip()
        offset = start + len(part) - len(part.lstrip())
        if not tag:
            if start == 0:
                raise _tag_error(text, len(part), "'||' has no tag before it")
            raise _tag_error(text, start - 2, "'||' has no tag after it")
        if tag == SUBSCRIBE_ALL:
            raise _tag_error(text, offset, "'*' must be the whole expression")
        if "|" in tag:
            raise _tag_error(text, offset + tag.index("|"), "single '|' (tags are joined by '||')")
        tags.append(tag)
        start += len(part) + len(TAG_SEPARATOR)
    return tags


@lru_cache(maxsize=1024)
def _compile_cached(expression: str) -> SqlFilter:
    return compile_sql(expression)  # SqlFilter is immutable, so sharing it is safe


class MessageFilter:
    """The filter of one subscription: ``(expression_type, expression)``.

    ``expression_type`` is ``TAG`` (the default when None) or ``SQL92``, any case.
    """

    __slots__ = ("expression", "expression_type", "sql_filter", "tag_filter")

    def __init__(self, expression_type: str | None = TAG, expression: str | None = None) -> None:
        kind = TAG if expression_type is None else expression_type.strip().upper()
        self.expression_type = kind
        self.tag_filter: TagFilter | None = None
        self.sql_filter: SqlFilter | None = None
        if kind == TAG:
            self.tag_filter = TagFilter.parse(expression)
            self.expression = self.tag_filter.expression
        elif kind == SQL92:
            self.sql_filter = _compile_cached(expression or "")
            self.expression = self.sql_filter.expression
        else:
            raise FilterSyntaxError(
                f"unknown filter expression type {expression_type!r}; expected TAG or SQL92"
            )

    @property
    def match_all(self) -> bool:
        """True when every message passes (tag filter ``*``)."""
        return self.tag_filter is not None and self.tag_filter.match_all

    def matches_hash(self, code: int) -> bool:
        """Cheap pre-check with the consume-queue tag hash; always True for SQL92."""
        return self.tag_filter is None or self.tag_filter.matches_hash(code)

    def matches(self, tag: str | None, properties: Mapping[str, str] | None = None) -> bool:
        """The real decision, from the message's tag and properties."""
        if self.tag_filter is not None:
            return self.tag_filter.matches(tag)
        assert self.sql_filter is not None
        props: Mapping[str, str] = properties if properties is not None else {}
        if tag and props.get(PROPERTY_TAGS) != tag:
            props = {**props, PROPERTY_TAGS: tag}
        return self.sql_filter.evaluate(props)

    def __repr__(self) -> str:
        return f"MessageFilter({self.expression_type!r}, {self.expression!r})"
