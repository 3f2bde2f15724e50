"""SQL-like predicates: parsed by our own recursive descent, checked against the table schema.

A user's condition never reaches an engine as text: it is parsed into a small AST whose literals
are coerced to the column types, then rendered again (`to_sql` with quoting per dialect, or
`to_arrow` for reads). Anything that is not a predicate is an `InvalidPredicateError`.

Grammar (keywords case-insensitive):
    expr      := and_expr (OR and_expr)*
    and_expr  := not_expr (AND not_expr)*
    not_expr  := NOT not_expr | '(' expr ')' | condition
    condition := operand (cmp operand | [NOT] IN '(' literal, ... ')' | IS [NOT] NULL
                 | [NOT] BETWEEN literal AND literal | [NOT] LIKE 'pattern'
                 | [NOT] ILIKE 'pattern') | bool_column
    operand   := column ['[' 'key' ']'] | literal
    literal   := 'string' | number | TRUE | FALSE | DATE 'yyyy-mm-dd' | TIMESTAMP 'iso'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from otel_delta.errors import InvalidPredicateError
from otel_delta.sql import Dialect, quote_identifier, quote_string
from otel_delta.tables.versions import retired_note

MAX_PREDICATE_LENGTH = 100_000
MAX_DEPTH = 64

# --- AST -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType  # the compared value's type (a map's value type for attributes['k'])
    key: str | None = None  # map access: attributes['http.route']


@dataclass(frozen=True)
class Value:
    value: Any  # already coerced: str, int, float, bool, date or tz-aware datetime
    type: pa.DataType


@dataclass(frozen=True)
class Compare:
    op: str  # = != < <= > >=
    column: Column
    value: Value


@dataclass(frozen=True)
class In:
    column: Column
    values: tuple[Value, ...]
    negated: bool


@dataclass(frozen=True)
class IsNull:
    column: Column
    negated: bool


@dataclass(frozen=True)
class Between:
    column: Column
    low: Value
    high: Value
    negated: bool


@dataclass(frozen=True)
class Like:
    column: Column
    pattern: str
    negated: bool
    ignore_case: bool = False  # ILIKE: letters match whatever their case (a log search)


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node = Compare | In | IsNull | Between | Like | And | Or | Not
Leaf = Compare | In | IsNull | Between | Like

# --- tokens --------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>'(?:[^']|'')*')
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<quoted>"(?:[^"]|"")+"|`(?:[^`]|``)+`)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|<>|!=|=|<|>)
  | (?P<punct>[(),\[\]])
    """,
    re.VERBOSE,
)
KEYWORDS = {
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "TRUE",
    "FALSE",
}
TYPED_LITERALS = ("DATE", "TIMESTAMP")  # only before a string: `date` is also a column
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class _Token:
    kind: str  # string number ident keyword op punct end
    text: str
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise InvalidPredicateError(f"unexpected character {text[pos]!r} at {pos}", text)
        kind = match.lastgroup or ""
        value = match.group()
        if kind == "ident" and value.upper() in KEYWORDS:
            tokens.append(_Token("keyword", value.upper(), pos))
        elif kind == "quoted":
            tokens.append(_Token("ident", value[1:-1].replace(value[0] * 2, value[0]), pos))
        elif kind != "ws":
            tokens.append(_Token(kind, value, pos))
        pos = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


# --- parser --------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def error(self, message: str, column: str | None = None) -> InvalidPredicateError:
        return InvalidPredicateError(message, self.text, column)

    @property
    def peek(self) -> _Token:
        return self.tokens[min(self.i, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek
        self.i += 1
        return token

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        token = self.peek
        if token.kind == kind and (text is None or token.text == text):
            self.i += 1
            return token
        return None

    def expect(self, kind: str, text: str | None = None) -> _Token:
        token = self.accept(kind, text)
        if token is None:
            found = self.peek.text or "end of input"
            raise self.error(f"expected {text or kind} at {self.peek.pos}, found {found!r}")
        return token

    def parse(self) -> Node:
        if not self.text.strip():
            raise self.error("empty predicate")
        node = self.expr()
        if self.peek.kind != "end":
            raise self.error(f"unexpected {self.peek.text!r} at {self.peek.pos}")
        return node

    def expr(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error("predicate nested too deeply")
        items = [self.and_expr()]
        while self.accept("keyword", "OR"):
            items.append(self.and_expr())
        self.depth -= 1
        return items[0] if len(items) == 1 else Or(tuple(items))

    def and_expr(self) -> Node:
        items = [self.not_expr()]
        while self.accept("keyword", "AND"):
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else And(tuple(items))

    def not_expr(self) -> Node:
        if self.accept("keyword", "NOT"):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.error("predicate nested too deeply")
            node = Not(self.not_expr())
            self.depth -= 1
            return node
        if self.accept("punct", "("):
            node = self.expr()
            self.expect("punct", ")")
            return node
        return self.condition()

    def condition(self) -> Node:
        left = self.operand()
        token = self.peek
        if token.kind == "op":
            self.take()
            op = "!=" if token.text == "<>" else token.text
            right = self.operand()
            if isinstance(left, Column) and isinstance(right, Column):
                raise self.error("comparing two columns is not supported", left.name)
            if isinstance(left, Column):
                return Compare(op, left, self.coerce(right, left, _ROUNDING.get(op)))
            if isinstance(right, Column):
                op = FLIPPED[op]
                return Compare(op, right, self.coerce(left, right, _ROUNDING.get(op)))
            raise self.error("a comparison needs a column on one side")
        column = self.need_column(left)
        negated = bool(self.accept("keyword", "NOT"))
        if self.accept("keyword", "IN"):
            self.expect("punct", "(")
            values = [self.coerce(self.literal(), column)]
            while self.accept("punct", ","):
                values.append(self.coerce(self.literal(), column))
            self.expect("punct", ")")
            return In(column, tuple(values), negated)
        if self.accept("keyword", "BETWEEN"):
            low = self.coerce(self.literal(), column, math.ceil)
            self.expect("keyword", "AND")
            high = self.coerce(self.literal(), column, math.floor)
            return Between(column, low, high, negated)
        like = self.accept("keyword", "LIKE") or self.accept("keyword", "ILIKE")
        if like:
            word = like.text.upper()
            if not pa.types.is_string(column.type):
                raise self.error(f"{word} needs a string column, {column.name} is {column.type}")
            pattern = self.literal()
            if not isinstance(pattern, str):
                raise self.error(f"{word} needs a string pattern")
            return Like(column, pattern, negated, ignore_case=word == "ILIKE")
        if not negated and self.accept("keyword", "IS"):
            is_not = bool(self.accept("keyword", "NOT"))
            self.expect("keyword", "NULL")
            return IsNull(column, is_not)
        if not negated and pa.types.is_boolean(column.type):  # a bare boolean column
            return Compare("=", column, Value(True, column.type))
        found = self.peek.text or "end of input"
        raise self.error(f"expected a comparison after {column.name}, found {found!r}")

    def need_column(self, operand: Column | object) -> Column:
        if not isinstance(operand, Column):
            raise self.error("a condition must start with a column")
        return operand

    def typed_literal_ahead(self) -> bool:
        token, following = self.peek, self.tokens[min(self.i + 1, len(self.tokens) - 1)]
        return (
            token.kind == "ident"
            and token.text.upper() in TYPED_LITERALS
            and following.kind == "string"
        )

    def operand(self) -> Column | object:
        token = self.peek
        if token.kind == "ident" and not self.typed_literal_ahead():
            self.take()
            return self.column(token.text)
        return self.literal()

    def column(self, name: str) -> Column:
        if name not in self.schema.names:
            raise self.error(f"unknown column {name!r}{retired_note(name)}", name)
        type_ = self.schema.field(name).type
        if self.accept("punct", "["):
            key = self.take()
            if key.kind != "string":
                raise self.error(f"map key of {name} must be a quoted string", name)
            self.expect("punct", "]")
            if not pa.types.is_map(type_):
                raise self.error(f"column {name} is {type_}, not a map", name)
            return Column(name, type_.item_type, _unquote(key.text))
        if not _comparable(type_) and not self.null_test_ahead():
            raise self.error(
                f"column {name} of type {type_} cannot be compared (only IS [NOT] NULL)", name
            )
        return Column(name, type_)

    def null_test_ahead(self) -> bool:
        """Does `IS [NOT] NULL` come next? Any column may be tested for NULL, also one that
        cannot be compared: whether an exponential histogram has a negative range, a span
        a status message struct, a row a list at all."""
        ahead = [t.text if t.kind == "keyword" else "" for t in self.tokens[self.i : self.i + 3]]
        return ahead[:2] == ["IS", "NULL"] or ahead[:3] == ["IS", "NOT", "NULL"]

    def literal(self) -> object:
        if self.typed_literal_ahead():
            kind = self.take().text.upper()
            return _parse_time(_unquote(self.take().text), kind == "DATE", self)
        token = self.take()
        if token.kind == "string":
            return _unquote(token.text)
        if token.kind == "number":
            text = token.text
            return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            return token.text == "TRUE"
        if token.kind == "keyword" and token.text == "NULL":
            raise self.error("compare with NULL using IS NULL / IS NOT NULL")
        raise self.error(f"expected a value at {token.pos}, found {token.text or 'end of input'!r}")

    def coerce(
        self, raw: object, column: Column, rounding: Callable[[float], int] | None = None
    ) -> Value:
        """`raw` as a value of the column's type. `rounding`: how a bound that is not a whole
        number becomes one for an integer column, keeping the same rows (`x > 1.5` is
        `x > 1`, `x >= 1.5` is `x >= 2`); without it (=, !=, IN) such a value is refused."""
        if isinstance(raw, Column):
            raise self.error("comparing two columns is not supported", column.name)
        type_ = column.type
        bad = self.error(f"{raw!r} is not a valid {type_} value for {column.name}", column.name)
        value: Any
        if pa.types.is_string(type_) or pa.types.is_large_string(type_):
            if not isinstance(raw, str):
                raise bad
            value = raw
            if column.key is None and column.name in _HEX_ID_COLUMNS and _HEX.fullmatch(raw):
                value = raw.lower()  # as the tables hold ids, and as `trace()` takes them
        elif pa.types.is_boolean(type_):
            if not isinstance(raw, bool):
                raise bad
            value = raw
        elif pa.types.is_integer(type_):
            if isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
                raw = int(raw)  # '1000000' on a BIGINT column, as SQL engines cast it
            if isinstance(raw, str) and rounding is not None and _NUMBER.fullmatch(raw.strip()):
                raw = float(raw)  # '1.5' as a bound of a BIGINT column
            if isinstance(raw, float) and math.isfinite(raw) and rounding is not None:
                raw = float(rounding(raw))  # a bound between two integers: the same rows
            if isinstance(raw, float) and raw.is_integer() and abs(raw) < 2**63:
                raw = int(raw)  # 1e6 on a BIGINT column
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise bad
            info = _int_range(type_)
            if not info[0] <= raw <= info[1]:
                raise bad
            value = raw
        elif pa.types.is_floating(type_):
            if isinstance(raw, str) and _NUMBER.fullmatch(raw.strip()):
                raw = float(raw)
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise bad
            if not math.isfinite(float(raw)):
                raise bad
            value = float(raw)
        elif pa.types.is_date(type_):
            if isinstance(raw, str):
                raw = _parse_time(raw, True, self)
            if isinstance(raw, datetime) or not isinstance(raw, date):
                raise bad
            value = raw
        elif pa.types.is_timestamp(type_):
            if isinstance(raw, str):
                raw = _parse_time(raw, False, self)
            if isinstance(raw, date) and not isinstance(raw, datetime):
                raw = datetime(raw.year, raw.month, raw.day, tzinfo=UTC)
            if not isinstance(raw, datetime):
                raise bad
            value = raw
        else:  # pragma: no cover - _comparable filters these
            raise bad
        return Value(value, type_)


# how a non-integer bound of an integer column is rounded, by operator (column on the left)
_ROUNDING: dict[str, Callable[[float], int]] = {
    ">": math.floor,
    "<=": math.floor,
    ">=": math.ceil,
    "<": math.ceil,
}
# ids the tables hold as lowercase hex (OTLP/JSON's form): a literal in upper case, as some
# UIs and logs print them, is the same id, not a value no row has
_HEX_ID_COLUMNS = frozenset({"trace_id", "span_id", "parent_span_id"})
_HEX = re.compile(r"[0-9a-fA-F]+")
# a string literal that is a number, for a numeric column (no inf/nan, no thousands separators)
_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _comparable(type_: pa.DataType) -> bool:
    return (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_date(type_)
        or pa.types.is_timestamp(type_)
    )


def _int_range(type_: pa.DataType) -> tuple[int, int]:
    bits = type_.bit_width
    if pa.types.is_unsigned_integer(type_):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _unquote(token: str) -> str:
    return token[1:-1].replace("''", "'")


def _parse_time(text: str, is_date: bool, parser: _Parser) -> date | datetime:
    try:
        if is_date:
            return date.fromisoformat(text)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        what = "date (YYYY-MM-DD)" if is_date else "timestamp (ISO 8601)"
        raise parser.error(f"{text!r} is not a valid {what}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# --- the validated predicate -----------------------------------------------------------------


@dataclass(frozen=True)
class Predicate:
    """A parsed, schema-checked condition; render it, never the text it came from."""

    text: str
    node: Node

    @property
    def columns(self) -> set[str]:
        return {leaf.column.name for leaf in leaves(self.node)}

    @property
    def nested_null_tests(self) -> list[str]:
        """The columns of a type that cannot be compared (structs, lists, maps) this condition
        tests for NULL: a scan reads them, but delta-rs's delete and merge cannot plan them."""
        return sorted(
            {
                leaf.column.name
                for leaf in leaves(self.node)
                if isinstance(leaf, IsNull) and not _comparable(leaf.column.type)
            }
        )

    def to_sql(self, dialect: Dialect = "datafusion", alias: str | None = None) -> str:
        """The condition as SQL for delta-rs (DataFusion) or Spark, every literal quoted by us."""
        return _sql(self.node, dialect, alias)

    def to_arrow(self) -> pc.Expression:
        """The condition as a pyarrow.compute expression for dataset scans."""
        return _arrow(self.node)

    def __str__(self) -> str:
        return self.to_sql()

    def with_hashed_literals(self, hash_text: Callable[[str], str]) -> str:
        """The condition as SQL with every literal (values, LIKE patterns) replaced by
        `hash_text` of its text: what an audit record may keep of a condition that named
        erased values. Column names and map keys stay readable."""
        return _sql(_hash_literals(self.node, hash_text), "spark", None)


def parse_predicate(text: str, schema: pa.Schema) -> Predicate:
    """Parse `text` and check it against `schema`; raises InvalidPredicateError."""
    if not isinstance(text, str):
        raise InvalidPredicateError(f"expected a string, got {type(text).__name__}", repr(text))
    if len(text) > MAX_PREDICATE_LENGTH:
        raise InvalidPredicateError("predicate too long", text[:80] + "...")
    return Predicate(text, _Parser(text, schema).parse())


def conjunction(predicates: list[Predicate]) -> Predicate | None:
    """Several filters ANDed together (None when there are none)."""
    if not predicates:
        return None
    if len(predicates) == 1:
        return predicates[0]
    text = " AND ".join(f"({p.text})" for p in predicates)
    return Predicate(text, And(tuple(p.node for p in predicates)))


def leaves(node: Node) -> list[Leaf]:
    if isinstance(node, And | Or):
        return [leaf for item in node.items for leaf in leaves(item)]
    if isinstance(node, Not):
        return leaves(node.item)
    return [node]


def _literal_text(value: Any) -> str:
    return value.isoformat() if isinstance(value, date | datetime) else str(value)


def _hash_literals(node: Node, hash_text: Callable[[str], str]) -> Node:
    def hashed(value: Value) -> Value:
        return Value(hash_text(_literal_text(value.value)), pa.string())

    if isinstance(node, And | Or):
        return type(node)(tuple(_hash_literals(item, hash_text) for item in node.items))
    if isinstance(node, Not):
        return Not(_hash_literals(node.item, hash_text))
    if isinstance(node, Compare):
        return replace(node, value=hashed(node.value))
    if isinstance(node, In):
        return replace(node, values=tuple(hashed(v) for v in node.values))
    if isinstance(node, Between):
        return replace(node, low=hashed(node.low), high=hashed(node.high))
    if isinstance(node, Like):
        return replace(node, pattern=hash_text(node.pattern))
    return node  # IS [NOT] NULL has no literal


# --- rendering -------------------------------------------------------------------------------


ARROW_UNITS = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}


def sql_literal(value: Any, dialect: Dialect, type_: pa.DataType | None = None) -> str:
    """`value` as a SQL literal; timestamps for DataFusion carry the column's exact type
    (delta-rs cannot compare a µs column with a plain ns TIMESTAMP literal)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") + "+00:00"
        if dialect == "datafusion":
            type_ = type_ if type_ is not None else pa.timestamp("us", tz="UTC")
            unit = ARROW_UNITS[type_.unit]
            zone = f'Some("{type_.tz}")' if type_.tz else "None"
            return f"arrow_cast('{text}', 'Timestamp({unit}, {zone})')"
        return f"TIMESTAMP '{text}'"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return quote_string(value, dialect)
    raise TypeError(f"no SQL literal for {value!r}")


def _column_sql(column: Column, dialect: Dialect, alias: str | None) -> str:
    text = quote_identifier(column.name, dialect)
    if alias:
        text = f"{alias}.{text}"
    if column.key is None:
        return text
    key = quote_string(column.key, dialect)
    if dialect == "spark":
        return f"{text}[{key}]"
    # delta-rs cannot plan `map['key']` (it reads it as a struct field): extract explicitly
    return f"map_extract({text}, {key})[1]"


def _sql(node: Node, dialect: Dialect, alias: str | None) -> str:
    if isinstance(node, And | Or):
        joiner = " AND " if isinstance(node, And) else " OR "
        return "(" + joiner.join(_sql(item, dialect, alias) for item in node.items) + ")"
    if isinstance(node, Not):
        return f"(NOT {_sql(node.item, dialect, alias)})"
    column = _column_sql(node.column, dialect, alias)
    negation = "NOT " if getattr(node, "negated", False) else ""
    if isinstance(node, Compare):
        return f"({column} {node.op} {sql_literal(node.value.value, dialect, node.value.type)})"
    if isinstance(node, In):
        values = ", ".join(sql_literal(v.value, dialect, v.type) for v in node.values)
        return f"({column} {negation}IN ({values}))"
    if isinstance(node, IsNull):
        return f"({column} IS {negation}NULL)"
    if isinstance(node, Between):
        low = sql_literal(node.low.value, dialect, node.low.type)
        high = sql_literal(node.high.value, dialect, node.high.type)
        return f"({column} {negation}BETWEEN {low} AND {high})"
    word = "ILIKE" if node.ignore_case else "LIKE"
    return f"({column} {negation}{word} {quote_string(node.pattern, dialect)})"


def _arrow_column(column: Column) -> pc.Expression:
    field = pc.field(column.name)
    if column.key is None:
        return field
    return pc.map_lookup(field, pa.scalar(column.key), "first")


def _scalar(value: Value) -> pa.Scalar:
    return pa.scalar(value.value, type=value.type)


_ARROW_OPS = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _arrow(node: Node) -> pc.Expression:
    if isinstance(node, And | Or):
        result = _arrow(node.items[0])
        for item in node.items[1:]:
            result = (result & _arrow(item)) if isinstance(node, And) else (result | _arrow(item))
        return result
    if isinstance(node, Not):
        return ~_arrow(node.item)
    column = _arrow_column(node.column)
    if isinstance(node, Compare):
        return _ARROW_OPS[node.op](column, _scalar(node.value))
    if isinstance(node, In):
        values = pa.array([v.value for v in node.values], type=node.column.type)
        found = column.isin(values)
        # SQL: NULL NOT IN (...) is unknown, so the row is not selected
        return (~found & column.is_valid()) if node.negated else found
    if isinstance(node, IsNull):
        return column.is_valid() if node.negated else column.is_null()
    if isinstance(node, Between):
        inside = (column >= _scalar(node.low)) & (column <= _scalar(node.high))
        return ~inside if node.negated else inside
    matched = pc.match_like(column, node.pattern, ignore_case=node.ignore_case)
    return ~matched if node.negated else matched


def like_regex(pattern: str, ignore_case: bool = False) -> re.Pattern[str]:
    """SQL LIKE (`%`, `_`, backslash escape) as a Python regex, for partition values; ILIKE
    with `ignore_case`."""
    out = []
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            out.append(re.escape(next(chars, "\\")))
        elif char == "%":
            out.append(".*")
        elif char == "_":
            out.append(".")
        else:
            out.append(re.escape(char))
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ignore_case else 0))
