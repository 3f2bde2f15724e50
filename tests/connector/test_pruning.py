"""File skipping decisions from partition values and min/max statistics."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from otel_delta.connector.predicates import parse_predicate
from otel_delta.connector.pruning import FileStats, may_match, partition_match
from otel_delta.tables.schemas import SPANS


def node(text: str):
    return parse_predicate(text, SPANS).node


def stats(service: str | None = "cart", **columns) -> FileStats:
    file = FileStats("f", 100, 10, partition={"service_name": service, "date": date(2024, 11, 19)})
    for column, (low, high, nulls) in columns.items():
        file.min[column], file.max[column], file.null_count[column] = low, high, nulls
    return file


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("service_name = 'cart'", True),
        ("service_name = 'search'", False),
        ("service_name != 'cart'", False),
        ("service_name IN ('a', 'cart')", True),
        ("service_name NOT IN ('a', 'cart')", False),
        ("service_name LIKE 'ca%'", True),
        ("service_name LIKE 'CA%'", False),
        ("service_name ILIKE 'CA%'", True),
        ("date BETWEEN '2024-11-01' AND '2024-11-18'", False),
        ("NOT (service_name = 'search')", True),
        ("service_name = 'cart' AND duration_ns > 5", None),
        ("service_name = 'search' AND duration_ns > 5", False),
        ("service_name = 'cart' OR duration_ns > 5", True),
        ("service_name IS NULL", False),
    ],
)
def test_partition_values_decide_exactly(text: str, expected: bool | None) -> None:
    assert partition_match(node(text), stats().partition) is expected


def test_null_partition_follows_sql_three_valued_logic() -> None:
    values = stats(service=None).partition
    assert partition_match(node("service_name IS NULL"), values) is True
    assert partition_match(node("service_name = 'cart'"), values) is False
    assert partition_match(node("NOT (service_name = 'cart')"), values) is False
    assert partition_match(node("NOT (service_name = 'x' OR date = '2024-11-19')"), values) is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("duration_ns = 50", True),
        ("duration_ns = 500", False),
        ("duration_ns < 10", False),
        ("duration_ns <= 10", True),
        ("duration_ns > 100", False),
        ("duration_ns BETWEEN 101 AND 200", False),
        ("duration_ns IN (1, 2, 3)", False),
        ("duration_ns IN (1, 20)", True),
        ("duration_ns IS NULL", False),
        ("trace_id IS NULL", True),
        ("trace_id IS NOT NULL", False),  # all ten values are NULL
        ("trace_id = 'ab'", False),
        ("name LIKE 'zz%'", False),
        ("name LIKE 'b%'", True),
        ("name LIKE 'B%'", False),  # below "apple" as bytes
        ("name ILIKE 'B%'", True),  # no prefix to prune by: "banana" may be there
        ("NOT (duration_ns = 500)", True),
        ("attributes['k'] = 'v'", True),
        ("kind = 'x'", True),  # no statistics: must read
        ("duration_ns = 500 OR name LIKE 'b%'", True),
        ("duration_ns = 500 AND name LIKE 'b%'", False),
    ],
)
def test_statistics_prune_only_when_certain(text: str, expected: bool) -> None:
    file = stats(duration_ns=(10, 100, 0), trace_id=("a", "z", 10), name=("apple", "cherry", 0))
    file.min.pop("trace_id")
    file.max.pop("trace_id")
    assert may_match(node(text), file) is expected


def test_timestamp_max_is_widened_to_the_next_millisecond() -> None:
    import pyarrow as pa

    from otel_delta.connector.pruning import file_stats

    truncated = datetime(2024, 11, 19, 8, 0, 0, 123000, tzinfo=UTC)
    actions = pa.table(
        {
            "path": ["f"],
            "size_bytes": [1],
            "num_records": [1],
            "min.start_time": pa.array([truncated], pa.timestamp("us", tz="UTC")),
            "max.start_time": pa.array([truncated], pa.timestamp("us", tz="UTC")),
        }
    )
    (file,) = file_stats(actions)
    assert may_match(node("start_time >= '2024-11-19T08:00:00.123456Z'"), file)
    assert not may_match(node("start_time >= '2024-11-19T08:00:00.124001Z'"), file)
