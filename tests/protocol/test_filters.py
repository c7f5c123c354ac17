"""Tag filters and the MessageFilter facade (TAG and SQL92)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterSyntaxError, InvalidArgumentError
from broker_core.message import tag_hash
from broker_core.protocol.filters import MessageFilter, TagFilter


@pytest.mark.parametrize("expr", [None, "", "*", "  *  ", " ", "\t"])
def test_subscribe_all(expr: str | None) -> None:
    f = TagFilter.parse(expr)
    assert f.match_all and f.tags == frozenset() and f.expression == "*"
    assert f.matches("TagA") and f.matches(None) and f.matches("")
    assert f.matches_hash(0) and f.matches_hash(tag_hash("TagA")) and f.matches_hash(12345)


@pytest.mark.parametrize(
    ("expr", "tags"),
    [
        ("TagA", {"TagA"}),
        ("TagA||TagB", {"TagA", "TagB"}),
        ("  TagA ||  TagB  ", {"TagA", "TagB"}),
        ("TagA || TagA", {"TagA"}),
        ("a b || c", {"a b", "c"}),
        ("tag-1 || tag.2 || 标签", {"tag-1", "tag.2", "标签"}),
    ],
)
def test_parse_tags(expr: str, tags: set[str]) -> None:
    f = TagFilter.parse(expr)
    assert not f.match_all and f.tags == tags and f.expression == expr
    assert f.codes == {tag_hash(t) for t in tags}


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("TagA", True),
        ("TagB", True),
        ("TagC", False),
        ("taga", False),
        (None, False),
        ("", False),
        (" TagA", False),
        ("TagA || TagB", False),
        ("*", False),
    ],
)
def test_tag_matches(tag: str | None, expected: bool) -> None:
    f = TagFilter.parse("TagA || TagB")
    assert f.matches(tag) is expected
    assert f.matches_hash(tag_hash(tag)) is expected


def test_matches_hash_is_only_a_pre_check() -> None:
    f = TagFilter.parse("TagA")
    assert f.matches_hash(tag_hash("TagA"))
    assert not f.matches_hash(0)  # a message without a tag
    assert not f.matches_hash(tag_hash("TagB"))


@pytest.mark.parametrize(
    ("expr", "fragments"),
    [
        ("TagA || || TagB", ["'||' has no tag after it", "position 6"]),
        ("TagA ||", ["'||' has no tag after it", "position 6"]),
        ("TagA||   ", ["no tag after it", "position 5"]),
        ("|| TagA", ["'||' has no tag before it", "position 1"]),
        ("  ||TagA", ["no tag before it", "position 3"]),
        ("||", ["no tag before it", "position 1"]),
        ("TagA || *", ["'*' must be the whole expression", "position 9"]),
        ("* || TagA", ["'*' must be the whole expression", "position 1"]),
        ("TagA | TagB", ["single '|'", "position 6"]),
        ("TagA|||TagB", ["single '|'", "position 7"]),
    ],
)
def test_tag_errors(expr: str, fragments: list[str]) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        TagFilter.parse(expr)
    message = str(info.value)
    assert message.startswith("tag filter: ") and f"'{expr}'" in message
    for fragment in fragments:
        assert fragment in message


def test_tag_filter_from_tags() -> None:
    f = TagFilter(["b", "a"])
    assert f.expression == "a||b" and f.matches("a") and not f.matches("c")
    assert TagFilter().match_all
    with pytest.raises(FilterSyntaxError):
        TagFilter([])
    with pytest.raises(FilterSyntaxError):
        TagFilter(["a", ""])


@pytest.mark.parametrize(
    ("kind", "expr", "tag", "props", "expected"),
    [
        ("TAG", "*", None, {}, True),
        ("TAG", None, "x", {}, True),
        (None, "TagA", "TagA", {}, True),
        ("tag", "TagA || TagB", "TagB", {}, True),
        (" Tag ", "TagA", "TagC", {"TAGS": "TagA"}, False),
        ("TAG", "TagA", None, {}, False),
        ("SQL92", "a > 1", None, {"a": "2"}, True),
        ("sql92", "a > 1", "t", {"a": "1"}, False),
        ("Sql92", "TAGS = 'TagA' AND a = 1", "TagA", {"a": "1"}, True),
        ("SQL92", "TAGS = 'TagA'", "TagB", {"TAGS": "TagA"}, False),
        ("SQL92", "TAGS = 'TagA'", None, {"TAGS": "TagA"}, True),
        ("SQL92", "TAGS IS NULL", None, {}, True),
        ("SQL92", "TAGS IN ('x', 'y')", "y", None, True),
        ("SQL92", "missing = 1", "t", {}, False),
        ("SQL92", "NOT missing = 1", "t", {}, False),
    ],
)
def test_message_filter(
    kind: str | None,
    expr: str | None,
    tag: str | None,
    props: dict[str, str] | None,
    expected: bool,
) -> None:
    f = MessageFilter(kind, expr)
    assert f.matches(tag, props) is expected


def test_message_filter_hash_pre_check() -> None:
    tag_filter = MessageFilter("TAG", "TagA")
    assert tag_filter.matches_hash(tag_hash("TagA")) and not tag_filter.matches_hash(0)
    assert not tag_filter.match_all and tag_filter.sql_filter is None
    sql_filter = MessageFilter("SQL92", "TAGS = 'TagA'")
    assert sql_filter.matches_hash(0) and sql_filter.matches_hash(tag_hash("other"))
    assert not sql_filter.match_all and sql_filter.tag_filter is None
    assert MessageFilter("TAG", "*").match_all


def test_message_filter_does_not_mutate_properties() -> None:
    props = {"a": "1"}
    assert MessageFilter("SQL92", "TAGS = 't' AND a = 1").matches("t", props)
    assert props == {"a": "1"}


def test_message_filter_metadata_and_cache() -> None:
    f = MessageFilter("sql92", "a = 1")
    assert f.expression_type == "SQL92" and f.expression == "a = 1"
    assert MessageFilter("SQL92", "a = 1").sql_filter is f.sql_filter  # compiled once
    assert repr(f) == "MessageFilter('SQL92', 'a = 1')"
    assert MessageFilter().expression_type == "TAG" and MessageFilter().match_all


@pytest.mark.parametrize(
    ("kind", "expr", "fragment"),
    [
        ("SQL", "a = 1", "unknown filter expression type 'SQL'"),
        ("", "a = 1", "unknown filter expression type ''"),
        ("REGEX", ".*", "expected TAG or SQL92"),
        ("SQL92", None, "SQL filter: expression is empty"),
        ("SQL92", "", "SQL filter: expression is empty"),
        ("SQL92", "a >", "position 4"),
        ("TAG", "a || ", "tag filter: '||' has no tag after it"),
    ],
)
def test_message_filter_errors(kind: str, expr: str | None, fragment: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        MessageFilter(kind, expr)
    assert fragment in str(info.value)
    assert isinstance(info.value, InvalidArgumentError)


TAG_TEXT = st.text(alphabet=st.sampled_from(list("ab|* \t*x")), max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.one_of(TAG_TEXT, st.text(max_size=20)), st.one_of(st.none(), st.text(max_size=4)))
def test_random_tag_expressions(expr: str, tag: str | None) -> None:
    try:
        f = TagFilter.parse(expr)
    except FilterSyntaxError as exc:
        assert str(exc).startswith("tag filter: ")
        return
    assert isinstance(f.matches(tag), bool)
    if f.matches(tag):  # the pre-check never drops a real match
        assert f.matches_hash(tag_hash(tag))


TAGS = (
    st.text(
        alphabet=st.characters(blacklist_characters="|", blacklist_categories=["Cs"]),
        min_size=1,
        max_size=8,
    )
    .map(str.strip)
    .filter(lambda t: t not in ("", "*"))
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TAGS, min_size=1, max_size=5), st.sampled_from(["||", " || ", "||  "]))
def test_joined_tags_round_trip(tags: list[str], separator: str) -> None:
    f = TagFilter.parse(separator.join(tags))
    assert f.tags == set(tags)
    assert all(f.matches(t) and f.matches_hash(tag_hash(t)) for t in tags)
