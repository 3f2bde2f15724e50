"""Row-group level reads: skip row groups by Parquet statistics and bloom filters, read filter
columns first.

File pruning (pruning.py) only sees the Delta log. Inside a surviving file, each Parquet row
group carries its own min/max/null counts, so the same `may_match` test drops row groups whose
ranges exclude the predicate (after compaction a trace id falls in one narrow row group). In
files as ingested, whose ids span the whole range, a row group's bloom filter (bloom.py) rules
out an id that `column = value` or `IN` asks for, from a few KB of the file. The
remaining row groups are read in two steps: first only the columns the predicate names
(e.g. `trace_id`), then every wanted column of just the row groups where some row matched.
The predicate itself is never pushed into pyarrow's scan: files delta-rs writes may hold
string_view columns, which pyarrow cannot compare with a string literal; it runs on batches
that the scan has already cast to the table schema.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaProtocolError

from otel_delta.connector.bloom import hash_value, may_contain, may_hold, read_bitset
from otel_delta.connector.predicates import Predicate
from otel_delta.connector.pruning import FileStats, may_match
from otel_delta.engines.data_files import local_filesystem
from otel_delta.errors import TableUnreadableError, describe
from otel_delta.sql import quote_identifier

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # imported where used: it loads pandas (otel_delta/nopandas.py)
    import pyarrow.dataset as ds

# Row groups whose full columns are read together in one (multi-threaded) scan.
MATCHED_CHUNK = 16
# Filter-column rows tested in one go when looking for row groups that hold a match.
FILTER_ROWS = 262_144
FRAGMENT_TAG = "__otel_delta_fragment"
# pyarrow scanner options of a streamed read (Query.to_batches: the ConnectorService's Query
# streams): one batch ahead, one file at a time, decoded on the reader's thread. pyarrow's
# defaults (16 batches and 4 files ahead, on its thread pool) decode as far ahead as they can
# whatever the reader takes, so a stream to a slow reader held the whole result (bench/
# query_stream.py). A read that materializes its result (Query.execute) keeps the defaults.
STREAMED_SCAN: dict[str, Any] = {
    "batch_readahead": 1,
    "fragment_readahead": 1,
    "use_threads": False,
}
# Share of tested row groups with a match above which the rest are read without testing.
UNSELECTIVE = 0.5


@dataclass(frozen=True)
class RowGroupPlan:
    """The row groups of the scanned files, and those their statistics cannot rule out."""

    fragments: list[ds.ParquetFileFragment]  # one per kept row group, in file order
    row_groups_total: int | None  # None: footers not read (no predicate, whole files)


def files_dataset(delta: DeltaTable, files: list[FileStats]) -> ds.FileSystemDataset:
    """A pyarrow dataset of just `files` (already pruned), in that order.

    delta-rs builds a fragment for every file of the snapshot (about 1 ms each); asking it for
    none keeps its protocol checks, file system and format, and we add the files we read,
    their partition values taken from the same add actions. A local table is read through
    pyarrow's native file system: delta-rs's is implemented in Python, so every file open
    holds the GIL.
    """
    import pyarrow.dataset as ds

    if any(urlparse(f.path).scheme for f in files):  # absolute URIs (e.g. a shallow clone)
        everything = pyarrow_dataset(delta)
        by_path = {fragment.path: fragment for fragment in everything.get_fragments()}
        return ds.FileSystemDataset(
            [by_path.get(unquote(f.path)) or by_path[f.path] for f in files],
            everything.schema,
            everything.format,
            filesystem=everything.filesystem,
        )
    empty = pyarrow_dataset(delta, file_pruning_predicate="false")
    schema = empty.schema
    filesystem = local_filesystem(delta.table_uri) or empty.filesystem
    fragments = [
        empty.format.make_fragment(
            unquote(f.path),  # add actions hold the path URL-encoded once more than on disk
            filesystem=filesystem,
            partition_expression=_partition_expression(f.partition, schema),
        )
        for f in files
    ]
    return ds.FileSystemDataset(fragments, schema, empty.format, filesystem=filesystem)


def deletion_vectors_applied(
    delta: DeltaTable,
    columns: list[str],
    predicate: Predicate | None,
    schema: pa.Schema,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """The rows matching `predicate` of a table with deletion vectors, `columns` of them, in
    `schema`'s types: read by delta-rs's DataFusion, which applies the vectors. DataFusion
    prunes by the log's statistics itself; the row groups' statistics and bloom filters of
    `read_batches` are not used here."""
    from deltalake import QueryBuilder

    select = ", ".join(quote_identifier(name, "datafusion") for name in columns)
    sql = f"SELECT {select} FROM rows"
    if predicate is not None:
        sql += f" WHERE {predicate.to_sql('datafusion')}"
    wanted = pa.schema([schema.field(name) for name in columns])
    try:  # the reader is lazy: the files are read, and fail, as it is iterated
        found = QueryBuilder().register("rows", delta).execute(sql)
        for batch in pa.RecordBatchReader.from_stream(found):
            for start in range(0, batch.num_rows, batch_size):
                # DataFusion's own types (string views, large lists) as the table's
                yield batch.slice(start, batch_size).cast(wanted)
    except Exception as exc:  # DataFusion's planning and I/O errors: our own kinds
        text = describe(exc)
        if "not found" in text.lower() or "no such file" in text.lower():
            # a data file of the version read is gone (vacuumed): as the pyarrow scan says it
            raise FileNotFoundError(text) from exc
        raise TableUnreadableError(delta.metadata().name or "?", delta.table_uri, text) from exc


def pyarrow_dataset(delta: DeltaTable, **options: Any) -> ds.Dataset:
    """delta-rs's pyarrow dataset of the table, or TableUnreadableError when the table asks
    readers for a feature that dataset cannot apply (`has_deletion_vectors`, a Spark user's
    DELETE once they turned them on: the queries read
    such a table with `deletion_vectors_applied` instead)."""
    try:
        return delta.to_pyarrow_dataset(**options)
    except DeltaProtocolError as exc:
        raise TableUnreadableError(
            delta.metadata().name or "?",
            delta.table_uri,
            f"{describe(exc)} (read it with Spark; to drop deletion vectors from the table, "
            "Spark: ALTER TABLE ... DROP FEATURE deletionVectors)",
        ) from exc


def _partition_expression(values: dict[str, Any], schema: pa.Schema) -> pc.Expression:
    """`column == value` (or `is_null`) per partition column: the scan fills these columns."""
    expression = pc.scalar(True)
    for name, value in values.items():
        field = pc.field(name)
        if value is None:
            term = field.is_null()
        else:
            term = field == pa.scalar(value, schema.field(name).type)
        expression = expression & term
    return expression


def plan_row_groups(
    dataset: ds.FileSystemDataset, files: list[FileStats], predicate: Predicate | None
) -> RowGroupPlan:
    """One fragment per row group of `files` that may hold a matching row (footers only).

    Without a predicate every row is read: whole files, footers left to the scan.
    """
    if predicate is None:
        return RowGroupPlan(list(dataset.get_fragments()), None)
    fragments, total, names = [], 0, predicate.columns
    for fragment, stats in zip(dataset.get_fragments(), files, strict=True):
        metadata = fragment.metadata
        total += metadata.num_row_groups
        filters = BloomFilters(fragment, metadata, names)
        try:
            for index in range(metadata.num_row_groups):
                group = _row_group_stats(stats, metadata.row_group(index), names)
                if may_match(predicate.node, group) and may_hold(
                    predicate.node, partial(filters.probe, index)
                ):
                    fragments.append(fragment.subset(row_group_ids=[index]))
        finally:
            filters.close()
    return RowGroupPlan(fragments, total)


class BloomFilters:
    """The bloom filters of one file's row groups, read when a probe first needs them (the file
    opened once, each filter read once)."""

    def __init__(self, fragment: Any, metadata: Any, names: set[str]) -> None:
        self._fragment = fragment
        self._metadata = metadata
        self._columns = {
            metadata.schema.column(j).path: j
            for j in range(metadata.num_columns)
            if metadata.schema.column(j).path in names
        }
        self._source: Any = None
        self._unreadable = False  # the file could not be opened for its filters
        self._bitsets: dict[tuple[int, int], bytes | None] = {}

    def probe(self, group: int, column: str, value: Any) -> bool | None:
        """Whether row group `group` may hold `value` in `column` (None: no filter to ask)."""
        j = self._columns.get(column)
        if j is None:
            return None
        hashed = hash_value(value)
        if hashed is None:
            return None
        bitset = self._bitset(group, j)
        return None if bitset is None else may_contain(bitset, hashed)

    def _bitset(self, group: int, j: int) -> bytes | None:
        if (group, j) not in self._bitsets:
            chunk = self._metadata.row_group(group).column(j)
            offset = chunk.bloom_filter_offset
            bitset = None
            if offset is not None and not self._unreadable:
                try:
                    if self._source is None:
                        fragment = self._fragment
                        self._source = fragment.filesystem.open_input_file(fragment.path)
                    bitset = read_bitset(self._source, offset, chunk.bloom_filter_length)
                except Exception as exc:  # a filter only saves a read: read the row group
                    log.debug("bloom filters of %s not read: %s", self._fragment.path, exc)
                    self._unreadable = True
            self._bitsets[group, j] = bitset
        return self._bitsets[group, j]

    def close(self) -> None:
        if self._source is not None:
            self._source.close()


def _row_group_stats(file: FileStats, group: Any, names: set[str]) -> FileStats:
    """A row group's statistics in FileStats form, for the top-level columns in `names`."""
    stats = FileStats(file.path, group.total_byte_size, group.num_rows, dict(file.partition))
    for j in range(group.num_columns):
        column = group.column(j)
        name = column.path_in_schema
        statistics = column.statistics
        if name not in names or statistics is None:
            continue  # nested (map/list) leaves are named a.b.c: never pruned by
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
    scan_options: dict[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Matching rows of the planned row groups, as batches with `columns`, in file order.

    `complete(batch, names)` adds NULL columns a file lacks (added after it was written);
    `scan_options`: pyarrow scanner options (STREAMED_SCAN for a streamed result).
    """
    options = scan_options or {}
    available = [c for c in columns if c in dataset.schema.names]
    if predicate is None:
        for batch in _scan(dataset, plan.fragments, available, batch_size, options):
            yield complete(batch, columns)
        return
    expression = predicate.to_arrow()
    filter_columns = [c for c in columns if c in predicate.columns]
    if set(filter_columns) == set(columns):  # nothing to save by reading twice
        matched: Iterator[ds.Fragment] = iter(plan.fragments)
    else:
        matched = _matching_fragments(
            dataset, plan.fragments, filter_columns, expression, batch_size, complete, options
        )
    while chunk := _take(matched, MATCHED_CHUNK):
        for batch in _scan(dataset, chunk, available, batch_size, options):
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
    scan_options: dict[str, Any],
) -> Iterator[ds.Fragment]:
    """The fragments where the predicate holds for some row, reading only `columns`.

    Batches are filtered many fragments at a time, each row tagged with its fragment's index:
    one filter call per file costs more than reading a small file's filter column. The rest
    are all yielded untested once most row groups turn out to match (the full read filters
    rows anyway).
    """
    available = [c for c in columns if c in dataset.schema.names]
    subset = _subset(dataset, fragments)
    scanner = subset.scanner(columns=available, batch_size=batch_size, **scan_options)
    pending: list[pa.RecordBatch] = []
    rows, current, last, tested = 0, -1, -1, 0
    for tagged in scanner.scan_batches():
        # batches arrive in fragment order; advance to the fragment this batch came from
        while current < 0 or not _same(fragments[current], tagged.fragment):
            current += 1
        batch = complete(tagged.record_batch, columns)
        if not batch.num_rows:
            continue
        tag = pa.array(np.full(batch.num_rows, current, dtype=np.int64))
        pending.append(batch.select(columns).append_column(FRAGMENT_TAG, tag))
        rows += batch.num_rows
        if rows >= FILTER_ROWS:
            hits = _hits(pending, expression, after=last)
            for i in hits:
                last = i
                yield fragments[i]
            pending, rows = [], 0
            if len(hits) > UNSELECTIVE * (current + 1 - tested):
                # most row groups match: reading filter columns first only adds work
                yield from fragments[last + 1 :]
                return
            tested = current + 1
    if pending:
        yield from (fragments[i] for i in _hits(pending, expression, after=last))


def _hits(batches: list[pa.RecordBatch], expression: pc.Expression, after: int) -> list[int]:
    """Sorted indices (above `after`: a fragment may span two groups of batches, and is
    yielded once) of the fragments with a matching row among the tagged batches."""
    matching = pa.Table.from_batches(batches).filter(expression)[FRAGMENT_TAG]
    return sorted(i for i in pc.unique(matching).to_pylist() if i > after)


def _same(planned: ds.ParquetFileFragment, scanned: ds.Fragment) -> bool:
    return planned.path == scanned.path and planned.row_groups[0].id == (
        scanned.row_groups[0].id if scanned.row_groups else None
    )


def _scan(
    dataset: ds.FileSystemDataset,
    fragments: list[ds.Fragment],
    columns: list[str],
    size: int,
    options: dict[str, Any],
) -> Iterator[pa.RecordBatch]:
    subset = _subset(dataset, fragments)
    return subset.scanner(columns=columns, batch_size=size, **options).to_batches()


def _subset(dataset: ds.FileSystemDataset, fragments: list[ds.Fragment]) -> ds.FileSystemDataset:
    import pyarrow.dataset as ds

    return ds.FileSystemDataset(
        fragments, dataset.schema, dataset.format, filesystem=dataset.filesystem
    )


def _take(items: Iterator[ds.Fragment], n: int) -> list[ds.Fragment]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            break
    return chunk
