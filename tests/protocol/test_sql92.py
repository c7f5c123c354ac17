"""SQL92 filters: operators, precedence, three-valued logic and value conversion."""

from __future__ import annotations

import itertools

import pytest

from broker_core.protocol.sql92 import (
    Compare,
    Condition,
    Lit,
    Logic,
    Prop,
    compile_sql,
    parse_sql,
    to_number,
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
