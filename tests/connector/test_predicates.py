"""The predicate parser: what it accepts, what it refuses, and that both renderings agree."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from otel_delta.connector.predicates import (
    And,
    Between,
    Compare,
    In,
    IsNull,
    Like,
    Not,
    Or,
    parse_predicate,
)
from otel_delta.errors import InvalidPredicateError, OtelDeltaError
from otel_delta.tables.schemas import METRICS_GAUGE, SPANS


def parse(text: str):
    return parse_predicate(text, SPANS).node


def test_grammar_builds_the_expected_tree() -> None:
    node = parse(
        "service_name = 'cart' AND (duration_ns > 5 OR NOT status_code IN ('STATUS_CODE_ERROR'))"
    )
    assert isinstance(node, And)
    first, second = node.items
    assert isinstance(first, Compare) and first.column.name == "service_name"
    assert first.value.value == "cart"
    assert isinstance(second, Or)
    assert isinstance(second.items[1], Not) and isinstance(second.items[1].item, In)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("trace_id IS NULL", IsNull),
        ("trace_id is not null", IsNull),
        ("events IS NULL", IsNull),  # any column may be tested for NULL, a list or a map too
        ("attributes is not null", IsNull),
        ("duration_ns BETWEEN 1 AND 10", Between),
        ("duration_ns NOT BETWEEN 1 AND 10", Between),
        ("name LIKE 'GET %'", Like),
        ("name NOT LIKE 'GET %'", Like),
        ("name ilike 'get %'", Like),
        ("kind NOT IN ('a', 'b')", In),
        ("5 < duration_ns", Compare),
        ("date = DATE '2024-11-19'", Compare),
        ("date >= '2024-11-19'", Compare),
        ("start_time < TIMESTAMP '2024-11-19T08:00:00Z'", Compare),
        ("start_time < '2024-11-19 08:00:00'", Compare),
        ("attributes['http.route'] = '/r/1'", Compare),
        ("\"service_name\" <> 'x'", Compare),
        ("`flags` != -1", Compare),
    ],
)
def test_accepts(text: str, kind: type) -> None:
    assert isinstance(parse(text), kind)


def test_literal_on_the_left_flips_the_operator() -> None:
    node = parse("5 < duration_ns")
    assert (node.op, node.column.name, node.value.value) == (">", "duration_ns", 5)


def test_literals_are_coerced_to_the_column_type() -> None:
    assert parse("date = '2024-11-19'").value.value == date(2024, 11, 19)
    moment = parse("start_time >= '2024-11-19T09:00:00+01:00'").value.value
    assert moment == datetime(2024, 11, 19, 8, tzinfo=UTC)
    assert parse("duration_ns > 5").value.value == 5
    assert parse("duration_ns > 1e6").value.value == 1_000_000
    assert parse("duration_ns > '1000000'").value.value == 1_000_000  # as SQL engines cast it
    # a bound between two integers, on an integer column: the integer that keeps the same rows
    assert parse("duration_ns > 123456788.5").value.value == 123456788
    assert parse("duration_ns >= 123456788.5").value.value == 123456789
    assert parse("duration_ns < '2.5'").value.value == 3
    assert parse("duration_ns <= 2.5").value.value == 2
    assert parse("2.5 < duration_ns").value.value == 2  # duration_ns > 2.5
    between = parse("duration_ns BETWEEN 1.5 AND 3.5")
    assert (between.low.value, between.high.value) == (2, 3)
    for never in ("duration_ns = 2.5", "duration_ns IN (1, 2.5)"):
        with pytest.raises(InvalidPredicateError):  # no integer is equal to it
            parse(never)
    for not_a_number in ("'1,000'", "'1e6x'", "'inf'", "''"):
        with pytest.raises(InvalidPredicateError):
            parse(f"duration_ns > {not_a_number}")
    # ids are stored as lowercase hex: an upper-case one is the same id (it matched no row)
    assert parse("trace_id = '0AF7651916CD43DD8448EB211C80319C'").value.value == (
        "0af7651916cd43dd8448eb211c80319c"
    )
    assert [v.value for v in parse("span_id IN ('00F067AA0BA902B7', 'x')").values] == [
        "00f067aa0ba902b7",
        "x",
    ]
    assert parse("attributes['trace_id'] = 'ABC'").value.value == "ABC"  # a map value: as is
    assert parse("name = 'ABC'").value.value == "ABC"
    gauge = METRICS_GAUGE
    assert parse_predicate("value_double > '1.5e2'", gauge).node.value.value == 150.0
    with pytest.raises(InvalidPredicateError):
        parse_predicate("value_double > 'nan'", gauge)


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("nope = 1", "nope"),
        ("service_name = 'a' AND missing_col > 3", "missing_col"),
        ("attributes['k'] = 'v' OR bogus IS NULL", "bogus"),
    ],
)
def test_unknown_column_is_named(text: str, column: str) -> None:
    with pytest.raises(InvalidPredicateError) as err:
        parse(text)
    assert err.value.column == column
    assert repr(column) in str(err.value)


def test_a_retired_column_is_named_with_what_replaced_it() -> None:
    """A query written for schema version 1 names the end time; today's tables derive it."""
    with pytest.raises(InvalidPredicateError) as err:
        parse("end_time_unix_nano > 5")
    assert err.value.column == "end_time_unix_nano"
    assert "schema version 2" in str(err.value)
    assert "start_time_unix_nano + duration_ns" in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "1; DROP TABLE spans",
        "service_name = 'a'; DROP TABLE spans",
        "service_name = 'a' -- comment",
        "service_name = 'unterminated",
        "service_name = 'a' OR",
        "service_name",
        "service_name = ",
        "= 'a'",
        "1 = 1",
        "service_name = trace_id",
        "duration_ns = 'five'",
        "duration_ns = 1.5",
        "duration_ns = TRUE",
        "service_name = 5",
        "service_name = NULL",
        "date = '2024-13-45'",
        "start_time > 'yesterday'",
        "events = 'x'",
        "events IS 'x'",
        "events NOT NULL",
        "events IS NOT 1",
        "attributes = 'x'",
        "service_name['k'] = 'x'",
        "attributes[1] = 'x'",
        "duration_ns LIKE '1%'",
        "duration_ns IN ()",
        "(service_name = 'a'",
        "service_name = 'a')",
        "service_name = 'a' AND AND trace_id = 'b'",
        "sleep(10) = 1",
        "service_name = 'a' UNION SELECT * FROM x",
        "flags > 99999999999999999999999",
        "duration_ns > 1e400",
        "service_name = $1",
        "service_name = ?",
        "service_name IS 'a'",
        "NOT",
        "(" * 200 + "service_name = 'a'" + ")" * 200,
    ],
)
def test_rejects_anything_that_is_not_a_valid_predicate(text: str) -> None:
    with pytest.raises(InvalidPredicateError) as err:
        parse(text)
    assert "\n" not in str(err.value)


def test_random_garbage_only_ever_raises_our_error() -> None:
    rng = random.Random(4)
    alphabet = "abcdefghijklmnopqrstuvwxyz_ '\"`()[],;=<>!-+*/%.0123456789\\\n\t"
    words = ["service_name", "trace_id", "AND", "OR", "NOT", "IN", "'x'", "1", "(", ")", "="]
    for _ in range(1500):
        if rng.random() < 0.5:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 10)))
        try:
            predicate = parse_predicate(text, SPANS)
        except OtelDeltaError as exc:
            assert isinstance(exc, InvalidPredicateError), text
            continue
        predicate.to_sql("datafusion"), predicate.to_sql("spark"), predicate.to_arrow()


def test_strings_are_quoted_for_each_dialect() -> None:
    predicate = parse_predicate("name = 'it''s \\ here'", SPANS)
    assert predicate.node.value.value == "it's \\ here"
    assert predicate.to_sql("datafusion") == "(\"name\" = 'it''s \\ here')"
    assert predicate.to_sql("spark") == "(`name` = 'it\\'s \\\\ here')"


def test_non_predicates_are_rejected_before_anything_runs() -> None:
    with pytest.raises(InvalidPredicateError):
        parse_predicate(123, SPANS)  # type: ignore[arg-type]


# --- the two renderings select the same rows ----------------------------------------------

AGREEMENT = [
    "service_name = 'cart'",
    "service_name != 'cart' AND date = '2024-11-20'",
    "duration_ns > 2000000",
    "duration_ns BETWEEN 1000000 AND 2000000",
    "duration_ns NOT BETWEEN 1000000 AND 2000000",
    "kind IN ('SPAN_KIND_SERVER', 'SPAN_KIND_CLIENT')",
    "kind NOT IN ('SPAN_KIND_SERVER')",
    "parent_span_id IS NULL",
    "parent_span_id IS NOT NULL AND NOT (status_code = 'STATUS_CODE_ERROR')",
    "name LIKE 'checkout%'",
    "name NOT LIKE '%op1'",
    "name ILIKE 'CHECKOUT%'",
    "name NOT ILIKE '%OP1'",
    "attributes['http.route'] = '/r/1'",
    "attributes['tenant'] IN ('t0', 't2') OR attributes['missing'] IS NOT NULL",
    "start_time >= TIMESTAMP '2024-11-19T08:01:40Z'",
    "date < DATE '2024-11-20' AND start_time < '2024-11-19 08:00:01.5'",
    "trace_state = 'vendor=abc,other=1'",
    "status_message = 'it''s'",
    "links IS NULL OR events IS NOT NULL",
]


@pytest.mark.e2e  # on the bridge-written lakehouse
@pytest.mark.parametrize("text", AGREEMENT)
def test_arrow_and_sql_renderings_select_the_same_rows(text: str, bridge_lake) -> None:
    delta = DeltaTable(str(bridge_lake / "spans"))
    predicate = parse_predicate(text, pa.schema(delta.schema().to_arrow()))
    by_arrow = delta.to_pyarrow_dataset().to_table(filter=predicate.to_arrow(), columns=["span_id"])
    reader = (
        QueryBuilder()
        .register("spans", delta)
        .execute(f"SELECT span_id FROM spans WHERE {predicate.to_sql('datafusion')}")
    )
    by_sql = pa.table(reader.read_all())
    assert sorted(by_arrow["span_id"].to_pylist()) == sorted(by_sql["span_id"].to_pylist())
    everything = delta.to_pyarrow_dataset().count_rows()
    assert everything > 0
