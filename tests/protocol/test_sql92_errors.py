"""SQL92 filters: syntax errors, length and nesting limits, tokenizer, compiled-filter contracts."""

from __future__ import annotations

import inspect
import sys

import pytest

from broker_core.errors import FilterSyntaxError, InvalidArgumentError
from broker_core.protocol.sql92 import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    SqlFilter,
    compile_sql,
    tokenize,
)


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
