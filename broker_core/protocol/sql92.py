"""SQL92 message filters with RocketMQ's semantics, compiled once and evaluated often.

:func:`compile_sql` tokenizes and parses an expression into a small AST, checks operand
types, then turns the AST into nested closures; :meth:`SqlFilter.evaluate` only runs
those closures. Evaluation uses SQL three-valued logic with ``None`` as UNKNOWN: a test
on a missing property, or on a value that does not convert to the literal's type, is
UNKNOWN, and a message matches only when the whole expression is TRUE.

Supported: ``AND OR NOT``, ``= <> != > >= < <=``, ``[NOT] BETWEEN x AND y``,
``[NOT] IN (...)``, ``IS [NOT] NULL``, ``[NOT] CONTAINS|STARTSWITH|ENDSWITH 'text'``,
parentheses, string / number / ``TRUE`` / ``FALSE`` literals. Strings and booleans
compare only with ``=`` and ``<>``. Every bad input raises :class:`FilterSyntaxError`
naming the 1-based character position; no other exception (not even ``RecursionError``)
escapes, whatever the input.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import FilterSyntaxError

MAX_EXPRESSION_LENGTH = 4096
MAX_NESTING = 64  # parentheses and NOTs, counted together

Number = int | float
Value = str | int | float | bool
Tri = bool | None  # None is SQL's UNKNOWN
Predicate = Callable[[Mapping[str, str]], Tri]
Check = Callable[[str], Tri]  # a test on a present property value

_STRING_OPS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": operator.contains,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}
KEYWORDS = frozenset(
    ["AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", *_STRING_OPS]
)
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIPPED = {"=": "=", "<>": "<>", "!=": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_BOOLS = {"true": True, "false": False}
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IDENT_RUN_RE = re.compile(r"[\w.$]+")
_TOKEN_RE = re.compile(
    r"""(?P<space>\s+)
      | (?P<string>'(?:[^']|'')*+')
      | (?P<number>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
      | (?P<word>(?:[^\W\d]|\$)[\w.$]*)
      | (?P<op><>|<=|>=|!=|[<>=])
      | (?P<punct>[(),])""",
    re.VERBOSE,
)


def to_number(text: str) -> Number | None:
    """A property value as int or float, or None when it is not a number."""
    if _INT_RE.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than int() accepts from a string
            return float(text)
    return float(text) if _FLOAT_RE.fullmatch(text) else None


def _error(expr: str, pos: int, problem: str) -> FilterSyntaxError:
    shown = expr if len(expr) <= 120 else "..." + expr[max(0, pos - 50) : pos + 50] + "..."
    return FilterSyntaxError(f"SQL filter: {problem} at position {pos + 1} in '{shown}'")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident keyword string number op ( ) , end
    text: str  # as written in the expression
    pos: int  # 0-based index into the expression
    value: Value = ""  # literal value; upper-cased word for keywords


def tokenize(expr: str) -> list[Token]:
    """Split ``expr`` into tokens, ending with an ``end`` token."""
    tokens: list[Token] = []
    pos, n = 0, len(expr)
    while pos < n:
        match = _TOKEN_RE.match(expr, pos)
        if match is None:
            char = expr[pos]
            problem = "unterminated string" if char == "'" else f"unexpected character {char!r}"
            raise _error(expr, pos, problem)
        kind, text, end = match.lastgroup or "", match.group(), match.end()
        if kind == "number" and (run := _IDENT_RUN_RE.match(expr, end)):
            raise _error(expr, pos, f"malformed number '{expr[pos : run.end()]}'")
        if kind != "space":
            tokens.append(_make_token(kind, text, pos))
        pos = end
    tokens.append(Token("end", "", n))
    return tokens


def _make_token(kind: str, text: str, pos: int) -> Token:
    if kind == "string":
        return Token(kind, text, pos, text[1:-1].replace("''", "'"))
    if kind == "number":
        number = to_number(text)
        return Token(kind, text, pos, 0 if number is None else number)
    if kind == "word":
        word = text.upper()
        return Token("keyword", text, pos, word) if word in KEYWORDS else Token("ident", text, pos)
    return Token(text if kind == "punct" else kind, text, pos)


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class Lit:
    value: Value


Operand = Prop | Lit


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # AND, OR (two or more items) or NOT (one item)
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> != < <= > >=
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Condition:
    op: str  # BETWEEN IN NULL CONTAINS STARTSWITH ENDSWITH
    name: str  # the property tested
    args: tuple[str | Number, ...]
    negated: bool


Node = Lit | Logic | Compare | Condition  # a Lit node is always TRUE or FALSE


def _kind(operand: Operand) -> str:
    if isinstance(operand, Prop):
        return "property"
    if isinstance(operand.value, bool):
        return "boolean"
    return "string" if isinstance(operand.value, str) else "number"


def _describe(tok: Token) -> str:
    if tok.kind == "end":
        return "end of expression"
    return f"'{tok.text}'" if len(tok.text) <= 30 else f"'{tok.text[:27]}...'"


class _Parser:
    """Recursive descent: or -> and -> not -> predicate -> operand."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.index = 0
        self.depth = 0
        self.names: set[str] = set()

    def parse(self) -> Node:
        node = self.parse_or()
        tok = self.tokens[self.index]
        if tok.kind != "end":
            raise self.error(tok, f"unexpected {_describe(tok)} after a complete expression")
        return node

    def advance(self) -> Token:
        tok = self.tokens[self.index]
        self.index += tok.kind != "end"
        return tok

    def at(self, kind: str, word: str = "") -> bool:
        tok = self.tokens[self.index]
        return tok.kind == kind and (not word or tok.value == word)

    def error(self, tok: Token, problem: str) -> FilterSyntaxError:
        return _error(self.expr, tok.pos, problem)

    def expect(self, kind: str, word: str, what: str) -> Token:
        if not self.at(kind, word):
            tok = self.tokens[self.index]
            found = "" if tok.kind == "end" else f", found {_describe(tok)}"
            raise self.error(tok, f"expected {what}{found}")
        return self.advance()

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(tok, f"nesting deeper than {MAX_NESTING} levels")

    def parse_or(self) -> Node:
        return self.parse_chain("OR", self.parse_and)

    def parse_and(self) -> Node:
        return self.parse_chain("AND", self.parse_not)

    def parse_chain(self, word: str, parse_item: Callable[[], Node]) -> Node:
        """``item (word item)*``, flattened so long chains do not nest."""
        items = [parse_item()]
        while self.at("keyword", word):
            self.advance()
            items.append(parse_item())
        return items[0] if len(items) == 1 else Logic(word, tuple(items))

    def parse_not(self) -> Node:
        if not self.at("keyword", "NOT"):
            return self.parse_predicate()
        self.enter(self.advance())
        node = Logic("NOT", (self.parse_not(),))
        self.depth -= 1
        return node

    def parse_predicate(self) -> Node:
        first = self.tokens[self.index]
        if first.kind == "(":
            self.enter(self.advance())
            node = self.parse_or()
            self.expect(")", "", "')'")
            self.depth -= 1
            return node
        left = self.parse_operand()
        nxt = self.tokens[self.index]
        if nxt.kind == "op":
            return self.parse_comparison(left)
        if nxt.kind == "keyword" and nxt.value in ("BETWEEN", "IN", "IS", "NOT", *_STRING_OPS):
            return self.parse_test(left)
        if isinstance(left, Lit) and isinstance(left.value, bool):
            return left
        raise self.error(
            nxt, f"expected a comparison after {_describe(first)}, found {_describe(nxt)}"
        )

    def parse_operand(self) -> Operand:
        tok = self.advance()
        if tok.kind == "ident":
            self.names.add(tok.text)
            return Prop(tok.text)
        if tok.kind in ("string", "number"):
            return Lit(tok.value)
        if tok.value in ("TRUE", "FALSE"):
            return Lit(tok.value == "TRUE")
        if tok.value == "NULL":
            raise self.error(tok, "NULL can only be used as IS NULL or IS NOT NULL")
        raise self.error(
            tok, f"missing operand: expected a property or value, found {_describe(tok)}"
        )

    def parse_comparison(self, left: Operand) -> Node:
        op = self.advance()
        right = self.parse_operand()
        kinds = {_kind(left), _kind(right)} - {"property"}
        if len(kinds) > 1:
            raise self.error(op, "cannot compare a {} with a {}".format(*sorted(kinds)))
        if kinds & {"string", "boolean"} and op.text not in ("=", "<>", "!="):
            raise self.error(op, f"'{op.text}' cannot compare {kinds.pop()}s (only = and <> can)")
        return Compare(op.text, left, right)

    def parse_test(self, left: Operand) -> Node:
        tok = self.advance()
        negated = tok.value == "NOT"
        if negated:
            tok = self.advance()
            if tok.value not in ("BETWEEN", "IN", *_STRING_OPS):
                raise self.error(
                    tok,
                    "expected BETWEEN, IN, CONTAINS, STARTSWITH or "
                    f"ENDSWITH after NOT, found {_describe(tok)}",
                )
        if not isinstance(left, Prop):
            raise self.error(tok, f"{tok.value} needs a property name on its left")
        if tok.value == "IS":
            negated = self.at("keyword", "NOT")
            if negated:
                self.advance()
            self.expect("keyword", "NULL", "NULL after IS")
            return Condition("NULL", left.name, (), negated)
        if tok.value == "BETWEEN":
            low = self.expect("number", "", "a number after BETWEEN").value
            self.expect("keyword", "AND", "AND between the BETWEEN bounds")
            high = self.expect("number", "", "a number after BETWEEN ... AND").value
            return Condition("BETWEEN", left.name, (_num(low), _num(high)), negated)
        if tok.value == "IN":
            return Condition("IN", left.name, self.in_list(), negated)
        text = self.expect("string", "", f"a string literal after {tok.value}").value
        return Condition(str(tok.value), left.name, (str(text),), negated)

    def in_list(self) -> tuple[str | Number, ...]:
        self.expect("(", "", "'(' after IN")
        if self.at(")"):
            raise self.error(self.tokens[self.index], "IN list is empty")
        values: list[str | Number] = []
        while True:
            tok = self.advance()
            if tok.kind not in ("string", "number"):
                raise self.error(
                    tok, f"IN list takes string or number literals, found {_describe(tok)}"
                )
            values.append(tok.value if isinstance(tok.value, str) else _num(tok.value))
            sep = self.advance()
            if sep.kind == ")":
                return tuple(values)
            if sep.kind != ",":
                raise self.error(sep, f"expected ',' or ')' in IN list, found {_describe(sep)}")


def _num(value: Value) -> Number:
    assert isinstance(value, int | float) and not isinstance(value, bool)
    return value


def _compile(node: Node) -> Predicate:
    if isinstance(node, Logic):
        preds = tuple(_compile(item) for item in node.items)
        if node.op == "NOT":
            inner = preds[0]
            return lambda props: None if (result := inner(props)) is None else not result
        return _compile_logic(node.op, preds)
    if isinstance(node, Compare):
        return _compile_compare(node)
    if isinstance(node, Condition):
        return _compile_test(node)
    value = node.value is True
    return lambda props: value


def _compile_logic(op: str, preds: tuple[Predicate, ...]) -> Predicate:
    stop = op == "OR"  # OR stops at the first TRUE, AND at the first FALSE

    def run(props: Mapping[str, str]) -> Tri:
        unknown = False
        for pred in preds:
            result = pred(props)
            if result is stop:
                return stop
            unknown = unknown or result is None
        return None if unknown else not stop

    return run


def _on_value(name: str, check: Check, negated: bool = False) -> Predicate:
    """UNKNOWN when the property is missing or ``check`` is UNKNOWN, else its result."""

    def run(props: Mapping[str, str]) -> Tri:
        value = props.get(name)
        result = None if value is None else check(value)
        return None if result is None else result is not negated

    return run


def _compile_compare(node: Compare) -> Predicate:
    left, right, op = node.left, node.right, node.op
    if isinstance(left, Lit) and isinstance(right, Lit):
        value = _OPS[op](left.value, right.value)
        return lambda props: value
    if isinstance(left, Lit):
        left, right, op = right, left, _FLIPPED[op]
    assert isinstance(left, Prop)
    fn = _OPS[op]
    if isinstance(right, Prop):
        return _compare_properties(left.name, right.name, op)
    lit = right.value
    if isinstance(lit, str):
        return _on_value(left.name, lambda value: fn(value, lit))
    convert: Callable[[str], Value | None] = (
        (lambda text: _BOOLS.get(text.lower())) if isinstance(lit, bool) else to_number
    )
    return _on_value(
        left.name,
        lambda value: None if (converted := convert(value)) is None else fn(converted, lit),
    )


def _compare_properties(left: str, right: str, op: str) -> Predicate:
    """Two properties: = and <> compare the strings, the others compare as numbers."""
    fn, as_text = _OPS[op], op in ("=", "<>", "!=")

    def run(props: Mapping[str, str]) -> Tri:
        a, b = props.get(left), props.get(right)
        if a is None or b is None:
            return None
        if as_text:
            return fn(a, b)
        x, y = to_number(a), to_number(b)
        return None if x is None or y is None else fn(x, y)

    return run


def _compile_test(node: Condition) -> Predicate:
    name, args, negated = node.name, node.args, node.negated
    if node.op == "NULL":
        return lambda props: (name in props) is negated
    if node.op == "IN":
        return _on_value(name, _in_check(args), negated)
    if node.op == "BETWEEN":
        low, high = _num(args[0]), _num(args[1])
        return _on_value(
            name,
            lambda value: None if (n := to_number(value)) is None else low <= n <= high,
            negated,
        )
    text, test = str(args[0]), _STRING_OPS[node.op]
    return _on_value(name, lambda value: test(value, text), negated)


def _in_check(values: tuple[str | Number, ...]) -> Check:
    """``v IN (a, b)`` is ``v = a OR v = b``: UNKNOWN when a number test cannot convert."""
    strings = frozenset(v for v in values if isinstance(v, str))
    numbers = frozenset(v for v in values if not isinstance(v, str))

    def check(value: str) -> Tri:
        if value in strings:
            return True
        if not numbers:
            return False
        number = to_number(value)
        return None if number is None else number in numbers

    return check


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled SQL92 filter; immutable and safe to share between threads."""

    expression: str
    properties: frozenset[str]  # the property names the expression refers to
    _predicate: Predicate = field(repr=False, compare=False)

    def evaluate(self, properties: Mapping[str, str]) -> bool:
        """True only when the expression is TRUE (not FALSE, not UNKNOWN)."""
        return self._predicate(properties) is True

    def evaluate3(self, properties: Mapping[str, str]) -> bool | None:
        """The three-valued result: True, False, or None for UNKNOWN."""
        return self._predicate(properties)


def parse_sql(expr: str) -> tuple[Node, frozenset[str]]:
    """The AST of ``expr`` and the property names it uses; raises FilterSyntaxError."""
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise FilterSyntaxError(
            f"SQL filter: expression is {len(expr)} characters long, "
            f"the limit is {MAX_EXPRESSION_LENGTH}"
        )
    if not expr.strip():
        raise FilterSyntaxError("SQL filter: expression is empty")
    parser = _Parser(expr)
    return parser.parse(), frozenset(parser.names)


def compile_sql(expr: str) -> SqlFilter:
    """Parse and compile ``expr`` once; raises FilterSyntaxError when it is invalid."""
    try:
        node, names = parse_sql(expr)
        return SqlFilter(expr, names, _compile(node))
    except RecursionError:  # only when the caller's own stack is already nearly full
        raise FilterSyntaxError("SQL filter: expression nests too deeply") from None
