"""SQL92 filters: Hypothesis fuzzing of compile and evaluate."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.errors import FilterSyntaxError
from broker_core.protocol.sql92 import (
    SqlFilter,
    compile_sql,
)

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
