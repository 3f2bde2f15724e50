"""Helpers of optimize/vacuum: partition filters from predicates, metrics, file paths."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from datetime import date
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable

from otel_delta.connector.predicates import And, Between, Compare, In, Predicate
from otel_delta.connector.pruning import file_stats, partition_match
from otel_delta.errors import InvalidPredicateError, InvalidQueryError, PartitionNotFoundError

FilterTuple = tuple[str, str, Any]


def z_order_columns(
    z_order: Sequence[str] | str | None, schema: pa.Schema, partition_columns: list[str]
) -> list[str]:
    if not z_order:
        return []
    columns = [z_order] if isinstance(z_order, str) else list(z_order)
    for column in columns:
        if column not in schema.names:
            raise InvalidQueryError(f"z_order: unknown column {column!r}", column=column)
        if column in partition_columns:
            raise InvalidQueryError(
                f"z_order: {column} is a partition column (files never mix its values)",
                column=column,
            )
        type_ = schema.field(column).type
        if pa.types.is_nested(type_) or pa.types.is_map(type_):
            raise InvalidQueryError(f"z_order: {column} is not a scalar column", column=column)
    return columns


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


def partition_filters(predicate: Predicate, partition_columns: list[str]) -> list[FilterTuple]:
    """delta-rs partition_filters from a conjunction of conditions on partition columns."""
    node = predicate.node
    items = node.items if isinstance(node, And) else (node,)
    filters: list[FilterTuple] = []
    for item in items:
        column = getattr(item, "column", None)
        if column is None or column.name not in partition_columns or column.key is not None:
            raise InvalidPredicateError(
                "optimize's where must be an AND of conditions on partition columns "
                f"{partition_columns}",
                predicate.text,
                getattr(column, "name", None),
            )
        if isinstance(item, Compare):
            filters.append((column.name, item.op, _text(item.value.value)))
        elif isinstance(item, In):
            op = "not in" if item.negated else "in"
            filters.append((column.name, op, [_text(v.value) for v in item.values]))
        elif isinstance(item, Between) and not item.negated:
            filters.append((column.name, ">=", _text(item.low.value)))
            filters.append((column.name, "<=", _text(item.high.value)))
        else:
            raise InvalidPredicateError(
                "optimize's where supports = != < <= > >= IN, NOT IN and BETWEEN",
                predicate.text,
                column.name,
            )
    return filters


def check_partitions_exist(table: str, predicate: Predicate, delta: DeltaTable) -> None:
    """PartitionNotFoundError when `col = value` / `col IN (...)` names no existing partition."""
    node = predicate.node
    items = node.items if isinstance(node, And) else (node,)
    partitions = delta.partitions()
    for item in items:
        if isinstance(item, Compare) and item.op == "=":
            wanted = [item.value.value]
        elif isinstance(item, In) and not item.negated:
            wanted = [v.value for v in item.values]
        else:
            continue
        name = item.column.name
        present = {p.get(name) for p in partitions}
        if not any(_text(value) in present for value in wanted):
            shown = ", ".join(repr(_text(v)) for v in wanted)
            raise PartitionNotFoundError(
                table, f"{name} = {shown}" if len(wanted) == 1 else f"{name} IN ({shown})"
            )


def rewrite_due(
    delta: DeltaTable, predicate: Predicate | None, z_order: bool, target_size: int
) -> bool:
    """Whether an optimize of the partitions `predicate` selects may rewrite any file, decided
    from the log without committing, so that one with nothing to do takes no maintenance lease
    (engines/lease.py: two empty commits) and reports the version it found, as the maintainer's
    rounds do (maintenance/tasks.binpacking_due).

    A Z-order rewrites every file of each selected partition (both engines, one file too): due
    when there is any. A compaction rewrites only bins of two files or more, of at most
    `target_size` together (`fits_a_bin_of_two`): exactly when Spark's bin packing (files by
    size) finds a bin, and a condition of delta-rs's (neighbours in the log's order), which
    may still find the two too far apart and commit nothing. A file with a deletion vector
    makes it due (Spark rewrites such a file alone)."""
    actions = pa.table(delta.get_add_actions(flatten=True))
    vectors = [n for n in actions.column_names if n.lower().startswith("deletion")]
    partitions = [n for n in actions.column_names if n.startswith("partition.")]
    wanted = ["path", "size_bytes", *partitions]
    selected = [
        (index, file)
        for index, file in enumerate(file_stats(actions.select(wanted)))
        if predicate is None or partition_match(predicate.node, file.partition) is not False
    ]
    if any(
        z_order or any(actions.column(n)[index].is_valid for n in vectors) for index, _ in selected
    ):
        return True
    return fits_a_bin_of_two(
        ((tuple(sorted(file.partition.items())), file.size_bytes) for _, file in selected),
        target_size,
    )


def fits_a_bin_of_two(sizes: Iterable[tuple[Hashable, int]], target_size: int) -> bool:
    """Whether some partition's two smallest files, of `sizes` as (partition, bytes), add up
    to at most `target_size`: a compaction rewrites only bins of two files or more, so it has
    nothing to do otherwise (the connector's optimize and the maintainer's bin-packing ask
    first, to take no lease for nothing)."""
    smallest: dict[Hashable, list[int]] = {}
    for partition, size in sizes:
        two = sorted([*smallest.get(partition, []), size])[:2]
        smallest[partition] = two
        if len(two) == 2 and sum(two) <= target_size:
            return True
    return False


def optimize_counts(metrics: dict[str, Any]) -> tuple[int, int, int]:
    """(files added, files removed, partitions optimized) from delta-rs or Spark metrics."""
    added = metrics.get("numFilesAdded", 0)
    removed = metrics.get("numFilesRemoved", 0)
    partitions = metrics.get("partitionsOptimized", metrics.get("numBatches", 0))
    return int(added or 0), int(removed or 0), int(partitions or 0)


def relative_path(table_uri: str, path: str) -> str:
    """A data file path relative to the table root, whatever form the engine reported."""
    root = local_path(table_uri).rstrip("/") + "/"
    local = local_path(path)
    return local[len(root) :] if local.startswith(root) else local


def local_path(uri: str) -> str:
    """A local filesystem path for a `file:` URI (other URIs unchanged)."""
    if uri.startswith("file:"):
        parsed = urlparse(uri)
        return unquote(parsed.path)
    return uri
