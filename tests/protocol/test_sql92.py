"""SQL92 filters: operators, precedence, three-valued logic, errors, and fuzzing."""

from __future__ import annotations

import inspect
import itertools
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterSyntaxError, InvalidArgumentError
from broker_core.protocol.sql92 import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    Compare,
    Condition,
    Lit,
    Logic,
    Prop,
    SqlFilter,
    compile_sql,
    parse_sql,
    to_number,
    tokenize,
)

T, F, U = True, False, None  # U is UNKNOWN
PROPS = {
    "a": "5",
    "b": "2.5",
    "s": "hello",
    "neg": "-3",
    "flag": "TRUE",
    "off": "false",
    "empty": "",
    "word": "abc",
    "big": "9" * 5000,
    "tag.x": "v",
    "$d": "1",
}


def run(expr: str, props: dict[str, str] | None = None) -> bool | None:
    return compile_sql(expr).evaluate3(PROPS if props is None else props)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # numeric comparisons, property on either side
        ("a = 5", T),
        ("a = 5.0", T),
        ("a <> 5", F),
        ("a != 4", T),
        ("a > 4", T),
        ("a > 5", F),
        ("a >= 5", T),
        ("a < 6", T),
        ("a < 5", F),
        ("a <= 5", T),
        ("4 < a", T),
        ("6 <= a", F),
        ("5 = a", T),
        ("b > 2", T),
        ("b = 2.5", T),
        ("neg < -2", T),
        ("neg = -3", T),
        ("a > -1.5", T),
        ("b < .6e1", T),
        ("a = 5e0", T),
        ("a < -1E-3", F),
        ("big > 1", T),
        ("a>4", T),
        ("a=-5", F),
        # string comparisons
        ("s = 'hello'", T),
        ("s <> 'hello'", F),
        ("s != 'x'", T),
        ("'hello' = s", T),
        ("empty = ''", T),
        ("s = 'HELLO'", F),
        ("word = 'it''s'", F),
        # booleans
        ("flag = TRUE", T),
        ("flag = true", T),
        ("off = FALSE", T),
        ("off <> TRUE", T),
        ("flag = FALSE", F),
        ("TRUE = flag", T),
        ("s = TRUE", U),
        ("TRUE", T),
        ("FALSE", F),
        ("false OR true", T),
        # literal against literal
        ("1 = 1", T),
        ("1 < 0.5", F),
        ("'x' = 'x'", T),
        ("'x' <> 'x'", F),
        ("TRUE = FALSE", F),
        # property against property
        ("a = a", T),
        ("a > b", T),
        ("a < b", F),
        ("a = b", F),
        ("s = word", F),
        ("s > word", U),
        ("a = missing", U),
        # BETWEEN
        ("a BETWEEN 1 AND 5", T),
        ("a BETWEEN 5 AND 9", T),
        ("a BETWEEN 6 AND 9", F),
        ("b BETWEEN 2.4 AND 2.6", T),
        ("a NOT BETWEEN 1 AND 4", T),
        ("a NOT BETWEEN 1 AND 9", F),
        ("a BETWEEN 9 AND 1", F),
        ("s BETWEEN 1 AND 2", U),
        ("missing BETWEEN 1 AND 2", U),
        ("missing NOT BETWEEN 1 AND 2", U),
        ("a between 1 and 9 and s = 'hello'", T),
        # IN
        ("s IN ('x', 'hello')", T),
        ("s IN ('x')", F),
        ("s NOT IN ('x', 'y')", T),
        ("s NOT IN ('hello')", F),
        ("a IN (1, 5)", T),
        ("a IN (5.0)", T),
        ("a IN ('5')", T),
        ("a IN ('05')", F),
        ("a IN (4, 6)", F),
        ("a NOT IN (4, 6)", T),
        ("s IN (1, 2)", U),
        ("s IN ('hello', 1)", T),
        ("s IN ('x', 1)", U),
        ("missing IN ('x')", U),
        ("missing NOT IN ('x')", U),
        ("neg in (-3)", T),
        # IS [NOT] NULL
        ("missing IS NULL", T),
        ("a IS NULL", F),
        ("a IS NOT NULL", T),
        ("missing IS NOT NULL", F),
        ("empty IS NULL", F),
        ("missing is not null", F),
        # CONTAINS / STARTSWITH / ENDSWITH
        ("s CONTAINS 'ell'", T),
        ("s CONTAINS 'x'", F),
        ("s NOT CONTAINS 'x'", T),
        ("s STARTSWITH 'he'", T),
        ("s STARTSWITH 'lo'", F),
        ("s NOT STARTSWITH 'lo'", T),
        ("s ENDSWITH 'lo'", T),
        ("s ENDSWITH 'he'", F),
        ("s NOT ENDSWITH 'he'", T),
        ("missing CONTAINS 'x'", U),
        ("missing NOT ENDSWITH 'x'", U),
        ("s contains ''", T),
        # identifiers with '.', '$', '_'; case-sensitive names
        ("tag.x = 'v'", T),
        ("$d = 1", T),
        ("A = 5", U),
    ],
)
def test_operators(expr: str, expected: bool | None) -> None:
    assert run(expr) is expected
    assert compile_sql(expr).evaluate(PROPS) is (expected is True)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # NOT binds tighter than AND, AND tighter than OR
        ("TRUE OR TRUE AND FALSE", T),
        ("(TRUE OR TRUE) AND FALSE", F),
        ("FALSE AND TRUE OR TRUE", T),
        ("FALSE AND (TRUE OR TRUE)", F),
        ("NOT FALSE AND FALSE", F),
        ("NOT (FALSE AND FALSE)", T),
        ("NOT TRUE OR TRUE", T),
        ("NOT (TRUE OR TRUE)", F),
        ("NOT NOT TRUE", T),
        ("a = 5 OR s = 'x' AND a = 6", T),
        ("(a = 5 OR s = 'x') AND a = 6", F),
        ("NOT a = 6 AND NOT a IN (7)", T),
        ("((((a = 5))))", T),
    ],
)
def test_precedence(expr: str, expected: bool) -> None:
    assert run(expr) is expected


def test_precedence_shapes_the_ast() -> None:
    node, names = parse_sql("a = 1 OR NOT b > 2 AND c IS NULL OR d IN ('x')")
    assert names == {"a", "b", "c", "d"}
    assert isinstance(node, Logic) and node.op == "OR" and len(node.items) == 3
    middle = node.items[1]
    assert isinstance(middle, Logic) and middle.op == "AND"
    assert middle.items[0] == Logic("NOT", (Compare(">", Prop("b"), Lit(2)),))
    assert middle.items[1] == Condition("NULL", "c", (), False)


ATOMS = {T: "a = 5", F: "a = 6", U: "missing = 1"}


def kleene_and(x: bool | None, y: bool | None) -> bool | None:
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def kleene_or(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


@pytest.mark.parametrize(("x", "y"), list(itertools.product([T, F, U], repeat=2)))
def test_three_valued_logic(x: bool | None, y: bool | None) -> None:
    assert run(f"{ATOMS[x]} AND {ATOMS[y]}") is kleene_and(x, y)
    assert run(f"{ATOMS[x]} OR {ATOMS[y]}") is kleene_or(x, y)
    assert run(f"NOT ({ATOMS[x]})") is (None if x is None else not x)
    assert run(f"NOT ({ATOMS[x]} AND {ATOMS[y]})") is run(f"NOT {ATOMS[x]} OR NOT {ATOMS[y]}")
    assert compile_sql(f"{ATOMS[x]} OR {ATOMS[y]}").evaluate(PROPS) is (kleene_or(x, y) is T)


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("v > 1", "abc"),
        ("v > 1", ""),
        ("v > 1", " 2"),
        ("v = 2", "2x"),
        ("v = 1", "1_000"),
        ("v = 1", "0x1"),
        ("v < 9", "NaN"),
        ("v < 9", "Infinity"),
        ("v = 3", "٣"),
        ("v BETWEEN 1 AND 9", "five"),
        ("v IN (1, 2)", "one"),
        ("v = TRUE", "yes"),
        ("v = FALSE", "0"),
        ("v > w", "x"),
    ],
)
def test_values_that_do_not_convert_are_unknown(expr: str, value: str) -> None:
    assert run(expr, {"v": value, "w": "1"}) is None
    assert run(f"NOT ({expr})", {"v": value, "w": "1"}) is None


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("1", 1),
        ("-7", -7),
        ("+3", 3),
        ("2.5", 2.5),
        ("1.", 1.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("-1.5E-1", -0.15),
        ("abc", None),
        ("", None),
        ("1.2.3", None),
        (" 1", None),
        ("9" * 5000, float("inf")),
    ],
)
def test_to_number(text: str, number: float | None) -> None:
    assert to_number(text) == number


@pytest.mark.parametrize(
    ("expr", "fragments"),
    [
        ("a > 1 AND (b < 2", ["expected ')'", "position 17", "'a > 1 AND (b < 2'"]),
        ("", ["empty"]),
        ("  \t\n", ["empty"]),
        ("a = 'abc", ["unterminated string", "position 5"]),
        ("a = 'it''s", ["unterminated string", "position 5"]),
        ("a # 1", ["unexpected character '#'", "position 3"]),
        ("a = 1 !", ["unexpected character '!'", "position 7"]),
        ("a = - 1", ["unexpected character '-'", "position 5"]),
        ("a = 1 b = 2", ["unexpected 'b' after a complete expression", "position 7"]),
        ("a = 1)", ["unexpected ')'", "position 6"]),
        ("a >", ["missing operand", "end of expression", "position 4"]),
        ("> 1", ["missing operand", "found '>'", "position 1"]),
        ("a = 1 AND", ["missing operand", "position 10"]),
        ("a = 1 OR OR b = 2", ["missing operand", "found 'OR'", "position 10"]),
        ("NOT", ["missing operand", "position 4"]),
        ("()", ["missing operand", "found ')'", "position 2"]),
        ("a", ["expected a comparison after 'a'", "position 2"]),
        ("a b", ["expected a comparison after 'a', found 'b'", "position 3"]),
        ("'x'", ["expected a comparison", "position 4"]),
        ("a IN ()", ["IN list is empty", "position 7"]),
        ("a IN 'x'", ["expected '(' after IN", "position 6"]),
        ("a IN ('x' 'y')", ["expected ',' or ')'", "position 11"]),
        ("a IN ('x',)", ["IN list takes string or number literals", "position 11"]),
        ("a IN ('x', b)", ["IN list takes", "found 'b'", "position 12"]),
        ("a IN ('x'", ["expected ',' or ')'", "end of expression"]),
        ("a > 'x'", ["'>' cannot compare strings", "position 3"]),
        ("'x' <= a", ["'<=' cannot compare strings", "position 5"]),
        ("a >= TRUE", ["cannot compare booleans", "position 3"]),
        ("a = 1 AND 'x' = 1", ["cannot compare a number with a string", "position 15"]),
        ("TRUE = 1", ["cannot compare a boolean with a number"]),
        ("a = NULL", ["NULL can only be used as IS NULL", "position 5"]),
        ("a IS 1", ["expected NULL after IS, found '1'", "position 6"]),
        ("a IS NOT", ["expected NULL after IS", "position 9"]),
        ("a BETWEEN 'x' AND 2", ["expected a number after BETWEEN", "position 11"]),
        ("a BETWEEN 1 OR 2", ["expected AND between the BETWEEN bounds", "position 13"]),
        ("a BETWEEN 1 AND b", ["expected a number after BETWEEN ... AND", "position 17"]),
        ("a CONTAINS 1", ["expected a string literal after CONTAINS", "position 12"]),
        ("a STARTSWITH b", ["expected a string literal after STARTSWITH"]),
        ("a NOT LIKE 'x'", ["expected BETWEEN, IN, CONTAINS", "found 'LIKE'", "position 7"]),
        ("a LIKE 'x'", ["expected a comparison after 'a', found 'LIKE'"]),
        ("'x' IN ('x')", ["IN needs a property name on its left", "position 5"]),
        ("1 BETWEEN 0 AND 2", ["BETWEEN needs a property name"]),
        ("TRUE IS NULL", ["IS needs a property name"]),
        ("1a = 2", ["malformed number '1a'", "position 1"]),
        ("a = 1.2.3", ["malformed number '1.2.3'", "position 5"]),
        ("a == 1", ["missing operand", "found '='", "position 4"]),
        ("a = 1 AND (b = 2))", ["unexpected ')'", "position 18"]),
        ("AND = 1", ["missing operand", "found 'AND'", "position 1"]),
    ],
)
def test_errors(expr: str, fragments: list[str]) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql(expr)
    message = str(info.value)
    assert message.startswith("SQL filter: ")
    for fragment in fragments:
        assert fragment in message
    assert isinstance(info.value, InvalidArgumentError)


def test_expression_length_limit() -> None:
    with pytest.raises(FilterSyntaxError, match=f"limit is {MAX_EXPRESSION_LENGTH}"):
        compile_sql("a = 1 OR " * 500 + "a = 1")
    padded = "a = 1" + " " * (MAX_EXPRESSION_LENGTH - 5)
    assert compile_sql(padded).evaluate({"a": "1"})


@pytest.mark.parametrize(
    "expr",
    [
        "(" * (MAX_NESTING + 1) + "a = 1" + ")" * (MAX_NESTING + 1),
        "NOT " * (MAX_NESTING + 1) + "a = 1",
        "(NOT " * 40 + "a = 1" + ")" * 40,
        "(" * 2000,
        "NOT " * 1000,
    ],
)
def test_nesting_limit(expr: str) -> None:
    with pytest.raises(FilterSyntaxError, match=f"nesting deeper than {MAX_NESTING}"):
        compile_sql(expr)


def test_nesting_at_the_limit_and_long_chains_work() -> None:
    deep = "(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING
    assert compile_sql(deep).evaluate({"a": "1"})
    assert compile_sql("NOT " * MAX_NESTING + "a = 1").evaluate({"a": "1"})
    chain = " AND ".join(["a = 1"] * 400)  # flat, so no deep recursion when evaluated
    assert compile_sql(chain).evaluate({"a": "1"})
    assert compile_sql(" OR ".join(["a = 2"] * 399 + ["a = 1"])).evaluate({"a": "1"})


def test_long_expression_error_shows_a_window_around_the_position() -> None:
    expr = "a = 1 AND " * 300 + "a = #"
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql(expr)
    assert f"position {len(expr)}" in str(info.value)
    assert "a = #" in str(info.value) and len(str(info.value)) < 250


def test_tokenizer() -> None:
    kinds = [(t.kind, t.value) for t in tokenize("a.b>=-1.5 AND x IN ('it''s', 2)")]
    assert kinds == [
        ("ident", ""),
        ("op", ""),
        ("number", -1.5),
        ("keyword", "AND"),
        ("ident", ""),
        ("keyword", "IN"),
        ("(", ""),
        ("string", "it's"),
        (",", ""),
        ("number", 2),
        (")", ""),
        ("end", ""),
    ]
    assert tokenize("x")[0].text == "x" and tokenize("x")[-1].pos == 1


def test_keywords_are_case_insensitive_names_are_not() -> None:
    f = compile_sql("Color is not null aNd color iN ('red') oR NoT Size BeTwEeN 1 AnD 2")
    assert f.properties == {"Color", "color", "Size"}
    assert f.evaluate({"Color": "x", "color": "red"})
    assert not f.evaluate({"color": "red", "Size": "1"})


def test_compiled_filter_is_reusable_and_immutable() -> None:
    f = compile_sql("price > 10 AND region = 'eu'")
    assert isinstance(f, SqlFilter) and f.expression == "price > 10 AND region = 'eu'"
    results = [f.evaluate({"price": str(p), "region": "eu"}) for p in range(20)]
    assert results == [p > 10 for p in range(20)]
    with pytest.raises(AttributeError):
        f.expression = "x"  # type: ignore[misc]
    assert compile_sql("price > 10 AND region = 'eu'") == f


def test_no_recursion_error_with_little_stack_left() -> None:
    limit = sys.getrecursionlimit()
    depth = len(inspect.stack())
    sys.setrecursionlimit(depth + 60)
    try:
        with pytest.raises(FilterSyntaxError, match="nests too deeply"):
            compile_sql("(" * 60 + "a = 1" + ")" * 60)
    finally:
        sys.setrecursionlimit(limit)


# --------------------------------------------------------------------------- fuzzing

VALID = [
    "a > 1 AND (b < 2 OR c = 'x')",
    "x IN ('a', 'b', 3) OR NOT y BETWEEN -1 AND 2.5",
    "s CONTAINS 'q' AND t IS NOT NULL",
    "NOT (flag = TRUE) OR n <> 3",
    "k STARTSWITH 'p' OR k NOT ENDSWITH 'z' AND m != 0",
]
SQL_ALPHABET = st.sampled_from(
    [
        *"abxyz01 2.-'(),=<>!_$ \t",
        " AND ",
        " OR ",
        " NOT ",
        " IN ",
        " IS ",
        " NULL ",
        " BETWEEN ",
        " TRUE ",
        " CONTAINS ",
        "''",
        "é",
        "\x00",
    ]
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALUES = st.one_of(
    st.text(max_size=6),
    st.integers(-5, 5).map(str),
    st.floats(-9, 9).map(str),
    st.sampled_from(["true", "FALSE", "x", "", "NaN", "1e999", "9" * 4400]),
)


def compile_or_error(expr: str) -> SqlFilter | None:
    try:
        return compile_sql(expr)
    except FilterSyntaxError as exc:
        assert str(exc).startswith("SQL filter: ")
        return None


def assert_evaluates(filt: SqlFilter, values: list[str], extra: dict[str, str]) -> None:
    props = dict(extra)
    props.update(zip(sorted(filt.properties), values, strict=False))
    assert filt.evaluate3(props) in (True, False, None)
    assert type(filt.evaluate(props)) is bool


@FUZZ
@given(st.text(max_size=80))
def test_random_text_compiles_or_raises_filter_syntax_error(expr: str) -> None:
    compile_or_error(expr)


@FUZZ
@given(st.lists(SQL_ALPHABET, max_size=30).map("".join), st.lists(VALUES, max_size=6))
def test_random_sql_like_text(expr: str, values: list[str]) -> None:
    filt = compile_or_error(expr)
    if filt is not None:
        assert_evaluates(filt, values, {})


@st.composite
def mutated(draw: st.DrawFn) -> str:
    expr = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(expr)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(SQL_ALPHABET)
        if action == "insert":
            expr = expr[:pos] + piece + expr[pos:]
        elif action == "delete":
            expr = expr[:pos] + expr[pos + len(piece) :]
        else:
            expr = expr[:pos] + piece + expr[pos + 1 :]
    return expr


@FUZZ
@given(
    mutated(),
    st.lists(VALUES, max_size=6),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3),
)
def test_mutated_expressions(expr: str, values: list[str], extra: dict[str, str]) -> None:
    filt = compile_or_error(expr)
    if filt is not None:
        assert_evaluates(filt, values, extra)


@FUZZ
@given(st.sampled_from(VALID), st.lists(VALUES, min_size=6, max_size=6))
def test_valid_expressions_evaluate_on_random_values(expr: str, values: list[str]) -> None:
    assert_evaluates(compile_sql(expr), values, {})
