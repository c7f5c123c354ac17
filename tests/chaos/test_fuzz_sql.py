"""Fuzz the SQL92 filter: generated expressions against a reference evaluator, and garbage.

``tests/protocol/test_sql92_fuzz.py`` already feeds random and character-mutated text to the
parser. This module adds what it lacks:

* a grammar that generates valid expressions (random keyword case, spacing, redundant
  parentheses, literals on either side) whose SQL three-valued result is computed here
  from the expression tree, independently of the parser, and compared on random property
  maps (a differential test of parsing, precedence and evaluation together);
* token-level mutations of those expressions, and arbitrary text: the parser either
  compiles or raises FilterSyntaxError naming a position inside the expression;
* the ``MessageFilter`` facade with random expression types, tags and properties.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterSyntaxError
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.sql92 import MAX_EXPRESSION_LENGTH, compile_sql
from tests.chaos.load import budgets

Tri = bool | None


# ---- the reference: property values and what they are as numbers ---------------------------

NAMES = ["a", "b", "c_1", "$x", "d.e", "é", "TAGS"]
NUMBER_OF: dict[str, int | float | None] = {
    "-3": -3,
    "-1": -1,
    "0": 0,
    "1": 1,
    "2": 2,
    "3": 3,
    "+2": 2,
    "007": 7,
    "1.5": 1.5,
    "-2.5": -2.5,
    ".5": 0.5,
    "1e0": 1.0,
    "abc": None,
    "": None,
    " 1": None,
    "true": None,
    "FALSE": None,
    "x'y": None,
    "1_0": None,
    "NaN": None,
    "0x1": None,
}
BOOL_OF = {"true": True, "false": False}
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": operator.contains,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}
NUMBER_LITERALS: dict[str, int | float] = {
    "-3": -3,
    "0": 0,
    "1": 1,
    "2": 2,
    "3": 3,
    "1.5": 1.5,
    "-0.5": -0.5,
    ".5": 0.5,
    "2e0": 2.0,
}
STRING_LITERALS = ["abc", "", "x'y", "1", "true", "é", "b c"]


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def not_of(value: Tri) -> Tri:
    return None if value is None else not value


# ---- expression trees: each renders itself and evaluates itself --------------------------


@dataclass(frozen=True)
class Leaf:
    """A predicate: its text (tokens, spaced later) and its reference evaluation."""

    tokens: tuple[str, ...]
    evaluate: Callable[[Mapping[str, str]], Tri]


@dataclass(frozen=True)
class Node:
    op: str  # AND, OR, NOT
    items: tuple[Tree, ...]


Tree = Leaf | Node


def reference(tree: Tree, props: Mapping[str, str]) -> Tri:
    """SQL three-valued logic over the tree (None is UNKNOWN)."""
    if isinstance(tree, Leaf):
        return tree.evaluate(props)
    results = [reference(item, props) for item in tree.items]
    if tree.op == "NOT":
        return not_of(results[0])
    stop = tree.op == "OR"  # OR is TRUE at the first TRUE, AND is FALSE at the first FALSE
    if stop in results:
        return stop
    return None if None in results else not stop


def on_value(name: str, test: Callable[[str], Tri], negated: bool = False) -> Leaf:
    """UNKNOWN when the property is missing or ``test`` is; else its result (negated)."""

    def run(props: Mapping[str, str]) -> Tri:
        value = props.get(name)
        result = None if value is None else test(value)
        return not_of(result) if negated else result

    return Leaf((), run)


def with_tokens(leaf: Leaf, *tokens: str) -> Leaf:
    return Leaf(tokens, leaf.evaluate)


@st.composite
def compare_number(draw: st.DrawFn) -> Leaf:
    name, op = draw(st.sampled_from(NAMES)), draw(st.sampled_from(sorted(OPS)))
    text = draw(st.sampled_from(sorted(NUMBER_LITERALS)))
    lit = NUMBER_LITERALS[text]
    if draw(st.booleans()):  # property on the left
        leaf = on_value(name, lambda v: None if (n := NUMBER_OF[v]) is None else OPS[op](n, lit))
        return with_tokens(leaf, name, op, text)
    leaf = on_value(name, lambda v: None if (n := NUMBER_OF[v]) is None else OPS[op](lit, n))
    return with_tokens(leaf, text, op, name)


@st.composite
def compare_text(draw: st.DrawFn) -> Leaf:
    name, op = draw(st.sampled_from(NAMES)), draw(st.sampled_from(["=", "<>", "!="]))
    if draw(st.booleans()):
        word = draw(st.sampled_from(["TRUE", "FALSE", "true", "False"]))
        flag = word.upper() == "TRUE"
        leaf = on_value(
            name, lambda v: None if (b := BOOL_OF.get(v.lower())) is None else OPS[op](b, flag)
        )
        tokens = (name, op, word)
    else:
        lit = draw(st.sampled_from(STRING_LITERALS))
        leaf = on_value(name, lambda v: OPS[op](v, lit))
        tokens = (name, op, quoted(lit))
    return with_tokens(leaf, *(reversed(tokens) if draw(st.booleans()) else tokens))


@st.composite
def compare_properties(draw: st.DrawFn) -> Leaf:
    left, right = draw(st.sampled_from(NAMES)), draw(st.sampled_from(NAMES))
    op = draw(st.sampled_from(sorted(OPS)))

    def run(props: Mapping[str, str]) -> Tri:
        a, b = props.get(left), props.get(right)
        if a is None or b is None:
            return None
        if op in ("=", "<>", "!="):
            return OPS[op](a, b)
        x, y = NUMBER_OF[a], NUMBER_OF[b]
        return None if x is None or y is None else OPS[op](x, y)

    return Leaf((left, op, right), run)


@st.composite
def condition(draw: st.DrawFn) -> Leaf:
    name, negated = draw(st.sampled_from(NAMES)), draw(st.booleans())
    kind = draw(st.sampled_from(["BETWEEN", "IN-TEXT", "IN-NUMBER", "NULL", *STRING_TESTS]))
    nt: tuple[str, ...] = ("NOT",) if negated else ()
    if kind == "NULL":
        leaf = Leaf((), lambda p: (name in p) is negated)
        return with_tokens(leaf, name, "IS", *nt, "NULL")
    if kind == "BETWEEN":
        lo, hi = (
            draw(st.sampled_from(sorted(NUMBER_LITERALS))),
            draw(st.sampled_from(sorted(NUMBER_LITERALS))),
        )
        low, high = NUMBER_LITERALS[lo], NUMBER_LITERALS[hi]
        leaf = on_value(
            name, lambda v: None if (n := NUMBER_OF[v]) is None else low <= n <= high, negated
        )
        return with_tokens(leaf, name, *nt, "BETWEEN", lo, "AND", hi)
    if kind.startswith("IN"):
        pool = STRING_LITERALS if kind == "IN-TEXT" else sorted(NUMBER_LITERALS)
        items = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4))
        if kind == "IN-TEXT":
            leaf = on_value(name, lambda v: v in items, negated)
            texts = [quoted(i) for i in items]
        else:
            numbers = {NUMBER_LITERALS[i] for i in items}
            leaf = on_value(
                name, lambda v: None if (n := NUMBER_OF[v]) is None else n in numbers, negated
            )
            texts = list(items)
        listed = [t for i, text in enumerate(texts) for t in ([","] if i else []) + [text]]
        return with_tokens(leaf, name, *nt, "IN", "(", *listed, ")")
    lit = draw(st.sampled_from(STRING_LITERALS))
    leaf = on_value(name, lambda v: STRING_TESTS[kind](v, lit), negated)
    return with_tokens(leaf, name, *nt, kind, quoted(lit))


@st.composite
def constant(draw: st.DrawFn) -> Leaf:
    if draw(st.booleans()):
        word = draw(st.sampled_from(["TRUE", "FALSE", "true", "False"]))
        value = word.upper() == "TRUE"
        return Leaf((word,), lambda p: value)
    a, b = (
        draw(st.sampled_from(sorted(NUMBER_LITERALS))),
        draw(st.sampled_from(sorted(NUMBER_LITERALS))),
    )
    op = draw(st.sampled_from(sorted(OPS)))
    value = OPS[op](NUMBER_LITERALS[a], NUMBER_LITERALS[b])
    return Leaf((a, op, b), lambda p: value)


LEAVES = st.one_of(compare_number(), compare_text(), compare_properties(), condition(), constant())
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(lambda items: Node("AND", tuple(items)), st.lists(inner, min_size=2, max_size=4)),
        st.builds(lambda items: Node("OR", tuple(items)), st.lists(inner, min_size=2, max_size=4)),
        st.builds(lambda item: Node("NOT", (item,)), inner),
    ),
    max_leaves=12,
)
PRECEDENCE = {"OR": 1, "AND": 2, "NOT": 3}


def tokens_of(tree: Tree, draw: st.DrawFn) -> list[str]:
    """Tokens of ``tree``: parentheses where precedence needs them, sometimes extra ones."""
    if isinstance(tree, Leaf):
        out = list(tree.tokens)
    else:
        out = []
        for i, item in enumerate(tree.items):
            part = tokens_of(item, draw)
            needs = (
                isinstance(item, Node)
                and PRECEDENCE[item.op] <= PRECEDENCE[tree.op]
                and (item.op != "NOT")
            )
            if isinstance(item, Leaf) and tree.op == "NOT" and item.tokens[0] in ("TRUE", "FALSE"):
                needs = False
            part = ["(", *part, ")"] if needs else part
            out += ([tree.op] if i or tree.op == "NOT" else []) + part
    return ["(", *out, ")"] if draw(st.integers(0, 5)) == 0 else out


KEYWORD_RE = re.compile(r"[A-Za-z]+")
SPACES = st.sampled_from([" ", "  ", "\t", "\n", " \r\n "])


@st.composite
def rendered(draw: st.DrawFn) -> tuple[Tree, str]:
    """A tree and its text, keywords in random case, tokens joined by random spacing."""
    tree = draw(TREES)
    words = []
    for token in tokens_of(tree, draw):
        if token.upper() in ("AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", *STRING_TESTS):
            token = draw(st.sampled_from([token.upper(), token.lower(), token.capitalize()]))
        words.append(token)
    text = words[0]
    for word in words[1:]:  # punctuation and operators need no space, words do
        glue = draw(SPACES)
        if not (KEYWORD_RE.match(word[-1:] + text[-1:]) or text[-1].isalnum()) or word in (
            "(",
            ")",
            ",",
        ):
            glue = draw(st.sampled_from(["", glue]))
        text += glue + word
    return tree, text


PROPERTY_MAPS = st.dictionaries(
    st.sampled_from(NAMES), st.sampled_from(sorted(NUMBER_OF)), max_size=len(NAMES)
)


@pytest.mark.parametrize("budget", budgets(300, 20_000))
def test_generated_expressions_evaluate_like_the_reference(budget: settings) -> None:
    @budget
    @given(rendered(), st.lists(PROPERTY_MAPS, min_size=1, max_size=4))
    def check(expr: tuple[Tree, str], maps: list[dict[str, str]]) -> None:
        tree, text = expr
        filt = compile_sql(text)
        for props in maps:
            expected = reference(tree, props)
            assert filt.evaluate3(props) is expected, (text, props)
            assert filt.evaluate(props) is (expected is True)

    check()


@pytest.mark.parametrize("budget", budgets(100, 5_000))
def test_and_or_not_agree_with_their_parts(budget: settings) -> None:
    """``x AND y`` / ``x OR y`` / ``NOT x`` from the parts' own compiled results."""

    @budget
    @given(rendered(), rendered(), PROPERTY_MAPS)
    def check(x: tuple[Tree, str], y: tuple[Tree, str], props: dict[str, str]) -> None:
        a, b = compile_sql(x[1]).evaluate3(props), compile_sql(y[1]).evaluate3(props)
        both = compile_sql(f"({x[1]}) AND ({y[1]})").evaluate3(props)
        either = compile_sql(f"({x[1]}) OR ({y[1]})").evaluate3(props)
        assert both is (False if False in (a, b) else None if None in (a, b) else True)
        assert either is (True if True in (a, b) else None if None in (a, b) else False)
        assert compile_sql(f"NOT ({x[1]})").evaluate3(props) is not_of(a)

    check()


# ---- garbage: compile or a positioned FilterSyntaxError -----------------------------------

POSITION_RE = re.compile(r" at position (\d+) in ")
UNPOSITIONED = ("SQL filter: expression is empty", "SQL filter: expression is ")


def compile_or_positioned_error(text: str) -> Any:
    """The compiled filter, or None after a FilterSyntaxError that points into ``text``."""
    try:
        return compile_sql(text)
    except FilterSyntaxError as exc:
        message = str(exc)
        match = POSITION_RE.search(message)
        if match is None:
            assert message.startswith(UNPOSITIONED), message
            assert not text.strip() or len(text) > MAX_EXPRESSION_LENGTH, message
        else:
            assert 1 <= int(match.group(1)) <= len(text) + 1, message
        return None


EXTRA_TOKENS = st.sampled_from(
    [
        "(",
        ")",
        ",",
        "'",
        "''",
        "AND",
        "OR",
        "NOT",
        "IN",
        "IS",
        "NULL",
        "BETWEEN",
        "TRUE",
        "CONTAINS",
        "=",
        "<>",
        "!",
        "<",
        ">=",
        "1",
        "-",
        "1.",
        "1e",
        "1e5x",
        "a",
        "$",
        ".",
        "é",
        "\x00",
        "\u00a0",
        "𝟙",
        "٣",
        "\\",
        '"',
        ";",
        "--",
        "/*",
        "?",
        "9" * 400,
    ]
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A generated expression after 1..4 token-level edits (delete, repeat, swap, insert)."""
    _, text = draw(rendered())
    tokens = re.findall(r"'(?:[^']|'')*'|\s+|\w+|[^\w\s]", text)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(tokens) - 1)))
        kind = draw(st.sampled_from(["delete", "repeat", "swap", "insert", "replace"]))
        if kind == "delete" and tokens:
            del tokens[at]
        elif kind == "repeat" and tokens:
            tokens.insert(at, tokens[at])
        elif kind == "swap" and at + 1 < len(tokens):
            tokens[at], tokens[at + 1] = tokens[at + 1], tokens[at]
        else:
            token = draw(EXTRA_TOKENS)
            tokens[at : at + (kind == "replace")] = [f" {token} "]
    return "".join(tokens)


@pytest.mark.parametrize("budget", budgets(300, 20_000))
def test_mutated_expressions_compile_or_raise_a_positioned_error(budget: settings) -> None:
    @budget
    @given(
        mutated(),
        st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=4),
        PROPERTY_MAPS,
    )
    def check(text: str, extra: dict[str, str], props: dict[str, str]) -> None:
        filt = compile_or_positioned_error(text)
        if filt is not None:
            merged = {**extra, **props}
            assert filt.evaluate3(merged) in (True, False, None)

    check()


@pytest.mark.parametrize("budget", budgets(300, 20_000))
def test_arbitrary_text_compiles_or_raises_a_positioned_error(budget: settings) -> None:
    @budget
    @given(
        st.one_of(
            st.text(max_size=60),
            st.lists(EXTRA_TOKENS, max_size=20).map(" ".join),
            st.text(min_size=MAX_EXPRESSION_LENGTH - 2, max_size=MAX_EXPRESSION_LENGTH + 2),
        )
    )
    def check(text: str) -> None:
        compile_or_positioned_error(text)

    check()


# ---- the MessageFilter facade -------------------------------------------------------------

TYPES = st.one_of(
    st.none(),
    st.sampled_from(["TAG", "tag", " SQL92 ", "sql92", "SQL", "", "*"]),
    st.text(max_size=6),
)
EXPRESSIONS = st.one_of(
    st.none(),
    st.text(max_size=30),
    rendered().map(lambda e: e[1]),
    st.lists(st.sampled_from(["A", "B", "||", "|", "*", " "]), max_size=6).map("".join),
)


@pytest.mark.parametrize("budget", budgets(300, 10_000))
def test_message_filter_builds_or_raises_filter_syntax_error(budget: settings) -> None:
    @budget
    @given(
        TYPES,
        EXPRESSIONS,
        st.one_of(st.none(), st.text(max_size=4)),
        st.one_of(st.none(), PROPERTY_MAPS),
    )
    def check(
        kind: str | None, expression: str | None, tag: str | None, props: dict[str, str] | None
    ) -> None:
        try:
            flt = MessageFilter(kind, expression)
        except FilterSyntaxError as exc:
            assert str(exc)
            return
        assert flt.expression_type in ("TAG", "SQL92")
        assert type(flt.matches(tag, props)) is bool
        assert type(flt.matches_hash(0)) is bool
        if flt.match_all:
            assert flt.matches(tag, props)

    check()
