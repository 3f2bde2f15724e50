"""Row-group level reads: skip row groups by Parquet statistics, read filter columns first.

File pruning (pruning.py) only sees the Delta log. Inside a surviving file, each Parquet row
group carries its own min/max/null counts, so the same `may_match` test drops row groups whose
ranges exclude the predicate (after Z-order a trace id falls in one narrow row group). The
remaining row groups are read in two steps: first only the columns the predicate names
(e.g. `trace_id`), then every wanted column of just the row groups where some row matched.
The predicate itself is never pushed into pyarrow's scan: files delta-rs writes may hold
string_view columns, which pyarrow cannot compare with a string literal; it runs on batches
that the scan has already cast to the table schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from otel_delta.connector.predicates import Predicate
from otel_delta.connector.pruning import FileStats, may_match

# Row groups whose full columns are read together in one (multi-threaded) scan.
MATCHED_CHUNK = 16


@dataclass(frozen=True)
class RowGroupPlan:
    """The row groups of the scanned files, and those their statistics cannot rule out."""

    fragments: list[ds.ParquetFileFragment]  # one per kept row group, in file order
    row_groups_total: int


def plan_row_groups(
    dataset: ds.FileSystemDataset, files: list[FileStats], predicate: Predicate | None
) -> RowGroupPlan:
    """One fragment per row group of `files` that may hold a matching row (footers only)."""
    by_path = {f.path: f for f in files}
    fragments, total = [], 0
    for fragment in dataset.get_fragments():
        stats = by_path.get(fragment.path)
        if stats is None:
            continue
        metadata = fragment.metadata
        total += metadata.num_row_groups
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            if predicate is None or may_match(predicate.node, _row_group_stats(stats, group)):
                fragments.append(fragment.subset(row_group_ids=[index]))
    return RowGroupPlan(fragments, total)


def _row_group_stats(file: FileStats, group: Any) -> FileStats:
    """A row group's statistics in FileStats form (top-level columns with min/max only)."""
    stats = FileStats(file.path, group.total_byte_size, group.num_rows, dict(file.partition))
    for j in range(group.num_columns):
        column = group.column(j)
        name = column.path_in_schema
        statistics = column.statistics
        if "." in name or statistics is None:
            continue  # nested (map/list) leaves: predicates on them are never pruned
        if statistics.has_null_count:
            stats.null_count[name] = statistics.null_count
        if statistics.has_min_max:
            stats.min[name], stats.max[name] = statistics.min, statistics.max
    return stats


def read_batches(
    dataset: ds.FileSystemDataset,
    plan: RowGroupPlan,
    columns: list[str],
    predicate: Predicate | None,
    batch_size: int,
    complete: Any,
) -> Iterator[pa.RecordBatch]:
    """Matching rows of the planned row groups, as batches with `columns`, in file order.

    `complete(batch, names)` adds NULL columns a file lacks (added after it was written).
    """
    available = [c for c in columns if c in dataset.schema.names]
    if predicate is None:
        for batch in _scan(dataset, plan.fragments, available, batch_size):
            yield complete(batch, columns)
        return
    expression = predicate.to_arrow()
    filter_columns = [c for c in columns if c in predicate.columns]
    if set(filter_columns) == set(columns):  # nothing to save by reading twice
        matched: Iterator[ds.Fragment] = iter(plan.fragments)
    else:
        matched = _matching_fragments(
            dataset, plan.fragments, filter_columns, expression, batch_size, complete
        )
    while chunk := _take(matched, MATCHED_CHUNK):
        for batch in _scan(dataset, chunk, available, batch_size):
            batch = complete(batch, columns).filter(expression)
            if batch.num_rows:
                yield batch


def _matching_fragments(
    dataset: ds.FileSystemDataset,
    fragments: list[ds.Fragment],
    columns: list[str],
    expression: pc.Expression,
    batch_size: int,
    complete: Any,
) -> Iterator[ds.Fragment]:
    """The fragments where the predicate holds for some row, reading only `columns`."""
    available = [c for c in columns if c in dataset.schema.names]
    subset = ds.FileSystemDataset(
        fragments, dataset.schema, dataset.format, filesystem=dataset.filesystem
    )
    scanner = subset.scanner(columns=available, batch_size=batch_size)
    position, last_hit = iter(range(len(fragments))), -1
    current = -1
    for tagged in scanner.scan_batches():
        # batches arrive in fragment order; advance to the fragment this batch came from
        while current < 0 or not _same(fragments[current], tagged.fragment):
            current = next(position)
        if current == last_hit:
            continue
        batch = complete(tagged.record_batch, columns)
        if batch.num_rows and batch.filter(expression).num_rows:
            last_hit = current
            yield fragments[current]


def _same(planned: ds.ParquetFileFragment, scanned: ds.Fragment) -> bool:
    return planned.path == scanned.path and planned.row_groups[0].id == (
        scanned.row_groups[0].id if scanned.row_groups else None
    )


def _scan(
    dataset: ds.FileSystemDataset, fragments: list[ds.Fragment], columns: list[str], size: int
) -> Iterator[pa.RecordBatch]:
    subset = ds.FileSystemDataset(
        fragments, dataset.schema, dataset.format, filesystem=dataset.filesystem
    )
    return subset.scanner(columns=columns, batch_size=size).to_batches()


def _take(items: Iterator[ds.Fragment], n: int) -> list[ds.Fragment]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            break
    return chunk
