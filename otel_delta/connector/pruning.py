"""File skipping: may a data file hold a row matching the predicate?

Answers come from the Delta log alone (partition values, min/max, null counts per file), so
a "no" is certain and the file is never opened. Anything unknown answers "maybe".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa

from otel_delta.connector.predicates import (
    And,
    Between,
    Compare,
    In,
    IsNull,
    Like,
    Node,
    Not,
    Or,
    like_regex,
)

# Delta stores timestamp statistics in milliseconds, truncated: a max is only an upper bound
# once the rest of its millisecond is added back.
TIMESTAMP_STATS_SLACK = timedelta(milliseconds=1)
_MISSING = object()


@dataclass
class FileStats:
    """One data file as the Delta log describes it."""

    path: str
    size_bytes: int
    num_records: int | None
    partition: dict[str, Any] = field(default_factory=dict)
    min: dict[str, Any] = field(default_factory=dict)
    max: dict[str, Any] = field(default_factory=dict)
    null_count: dict[str, Any] = field(default_factory=dict)


def file_stats(actions: pa.Table) -> list[FileStats]:
    """Parse `DeltaTable.get_add_actions(flatten=True)` into FileStats."""
    files = []
    for row in actions.to_pylist():
        stats = FileStats(row["path"], row.get("size_bytes") or 0, row.get("num_records"))
        for key, value in row.items():
            prefix, _, column = key.partition(".")
            if not column:
                continue
            if prefix == "partition":
                stats.partition[column] = value
            elif prefix == "min" and value is not None:
                stats.min[column] = value
            elif prefix == "max" and value is not None:
                stats.max[column] = (
                    value + TIMESTAMP_STATS_SLACK if isinstance(value, datetime) else value
                )
            elif prefix == "null_count" and value is not None:
                stats.null_count[column] = value
        files.append(stats)
    return files


def partition_match(node: Node, values: dict[str, Any]) -> bool | None:
    """Exact truth of `node` for a file's partition values; None if it names other columns.

    SQL three-valued logic: an unknown (NULL) result selects nothing, so it becomes False.
    """
    truth = _truth(node, values)
    if truth is _MISSING:
        return None
    return bool(truth)


def _truth(node: Node, values: dict[str, Any]) -> Any:
    """True / False / None (SQL unknown), or _MISSING when other columns decide."""
    if isinstance(node, And):
        results = [_truth(item, values) for item in node.items]
        if False in results:
            return False
        if _MISSING in results:
            return _MISSING
        return None if None in results else True
    if isinstance(node, Or):
        results = [_truth(item, values) for item in node.items]
        if True in results:
            return True
        if _MISSING in results:
            return _MISSING
        return None if None in results else False
    if isinstance(node, Not):
        inner = _truth(node.item, values)
        return inner if inner is _MISSING or inner is None else not inner
    column = node.column
    if column.name not in values or column.key is not None:
        return _MISSING
    value = values[column.name]
    if isinstance(node, IsNull):
        return (value is not None) if node.negated else (value is None)
    if value is None:
        return None
    if isinstance(node, Compare):
        return _compare(node.op, value, node.value.value)
    if isinstance(node, In):
        found = any(_compare("=", value, v.value) for v in node.values)
        return not found if node.negated else found
    if isinstance(node, Between):
        inside = _compare(">=", value, node.low.value) and _compare("<=", value, node.high.value)
        return not inside if node.negated else inside
    assert isinstance(node, Like)
    matched = like_regex(node.pattern, node.ignore_case).fullmatch(str(value)) is not None
    return not matched if node.negated else matched


def _compare(op: str, left: Any, right: Any) -> bool:
    if isinstance(left, date) and not isinstance(left, datetime) and isinstance(right, datetime):
        left = datetime(left.year, left.month, left.day, tzinfo=right.tzinfo)
    return {
        "=": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[op]


def may_match(node: Node, stats: FileStats) -> bool:
    """False only when no row of the file can satisfy `node`."""
    exact = partition_match(node, stats.partition)
    if exact is not None:
        return exact
    if isinstance(node, And):
        return all(may_match(item, stats) for item in node.items)
    if isinstance(node, Or):
        return any(may_match(item, stats) for item in node.items)
    if isinstance(node, Not):
        return True  # negating a "maybe" stays a maybe
    column = node.column.name
    if node.column.key is not None:
        return True
    low, high = stats.min.get(column), stats.max.get(column)
    nulls, rows = stats.null_count.get(column), stats.num_records
    if isinstance(node, IsNull):
        if node.negated:
            return nulls is None or rows is None or nulls < rows
        return nulls is None or nulls > 0
    if rows is not None and nulls is not None and nulls >= rows:
        return False  # only NULLs: no comparison can be true
    if low is None or high is None:
        return True
    if isinstance(node, Compare):
        return _range_may_match(node.op, low, high, node.value.value)
    if isinstance(node, In):
        if node.negated:
            return True
        return any(_range_may_match("=", low, high, v.value) for v in node.values)
    if isinstance(node, Between):
        if node.negated:
            return True
        return high >= node.low.value and low <= node.high.value
    if isinstance(node, Like) and not node.negated and not node.ignore_case:
        prefix = _like_prefix(node.pattern)
        if prefix:
            return high >= prefix and low[: len(prefix)] <= prefix
    return True


def _range_may_match(op: str, low: Any, high: Any, value: Any) -> bool:
    try:
        if op == "=":
            return low <= value <= high
        if op == "!=":
            return not (low == high == value)
        if op == "<":
            return low < value
        if op == "<=":
            return low <= value
        if op == ">":
            return high > value
        return high >= value
    except TypeError:  # statistics of an unexpected type: do not prune
        return True


def _like_prefix(pattern: str) -> str:
    prefix = []
    for char in pattern:
        if char in "%_\\":
            break
        prefix.append(char)
    return "".join(prefix)
