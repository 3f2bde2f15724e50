"""Clustered compaction of today's partition: rewrite the small files ingestion wrote as
fewer files whose rows are sorted by the table's cluster key, without changing a row.

Why our own and not delta-rs's `optimize`: delta-rs compacts every small file of the
partitions it is given, so it cannot leave alone the files ingestion wrote a minute ago, nor
the files an earlier round already compacted (today's partition would be rewritten again each
round while it grows), and its Z-order rewrites a whole partition each time. Here files are
chosen one by one from the Delta log: ingested files older than a minimum age, grouped per
partition up to GROUP_INPUT_BYTES of input (the rows are sorted in memory). Each group is
read, sorted by the layout's cluster key (trace id then time for spans and logs: the rows of
one trace end up next to each other, in one narrow row group the reader finds by its
statistics; inside a row group the traces follow their first span's time, `cluster_rows`)
and written with the table's encodings at the compaction zstd level, as one file named
CLUSTERED_PREFIX…, which this module never rewrites: after the day closes, closed_days.py
sorts the partition's files into target-size files with disjoint trace id ranges. Each row is
so rewritten at most twice.

The commit removes the inputs and adds the output with dataChange=false, so readers of the
change feed or a stream see nothing new, and it is safe beside concurrent writers: appends
commit around it (delta-rs rebases the commit over them), while a commit that removed one of
the inputs meanwhile (a delete, retention, another compaction) makes this one fail instead of
bringing those rows back. The file of a group whose commit failed is deleted (only a crash
between writing and committing leaves one behind, never referenced by the log)
(`commit_swap`, which closed_days.py shares).

Statistics of the new file are taken from its Parquet footer, for the top-level scalar
columns, in the format delta-rs writes (otel_delta.engines.data_files).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from otel_delta.config import TableSettings
from otel_delta.disk import local_path, sync_files
from otel_delta.engines.data_files import (
    DataFile,
    commit_actions,
    footer_stats,
    local_filesystem,
    partition_text,
    plain_parquet,
    run_starts,
    stats_columns,
)
from otel_delta.engines.lease import LEASES
from otel_delta.errors import ConcurrentModificationError, describe
from otel_delta.lakehouse import commit_info, rewrite_transaction
from otel_delta.tables.layout import COMPACTION_LEVEL, Layout, parquet_options

log = logging.getLogger(__name__)

ROW_GROUP_ROWS = 128 * 1024  # rows per row group of a compacted file: narrow trace id ranges
# Input (compressed bytes on disk) of one rewrite. The rows are sorted in memory, and decoded
# telemetry is ~20x its zstd size in Arrow (measured: 1,254 B/span in Arrow, ~62 on disk), so
# 8 MiB of files is ~160 MiB of Arrow, twice that while sorting.
GROUP_INPUT_BYTES = 8 * 1024 * 1024
CLUSTERED_PREFIX = "clustered-"  # names the files this module writes: never rewritten by it


@dataclass(frozen=True)
class RewriteOptions:
    """How rewritten files are encoded and committed."""

    compression: str = "ZSTD"
    compression_level: int = COMPACTION_LEVEL
    max_commit_retries: int = 15
    group_input_bytes: int = GROUP_INPUT_BYTES
    row_group_rows: int = ROW_GROUP_ROWS  # of the files this module writes
    # the table's maintenance lease, taken before each rewrite commits (engines/lease.py)
    lease_seconds: float = TableSettings.model_fields["maintenance_lease_seconds"].default


@dataclass(frozen=True)
class Candidate:
    """One live file of the table, as the Delta log describes it."""

    path: str  # as in the add action (URL-encoded)
    size: int
    modification_ms: int
    partition: tuple[tuple[str, str | None], ...]  # partition values as the log writes them


@dataclass
class CompactionResult:
    partitions: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    bytes_removed: int = 0
    bytes_added: int = 0

    def add(self, other: CompactionResult) -> None:
        """Count `other`'s files, rows and bytes in too (not its partitions)."""
        self.files_removed += other.files_removed
        self.files_added += other.files_added
        self.rows += other.rows
        self.bytes_removed += other.bytes_removed
        self.bytes_added += other.bytes_added


def candidates(delta: DeltaTable) -> list[Candidate]:
    """Every live file of the current snapshot with its size, age and partition values."""
    actions = pa.table(delta.get_add_actions(flatten=True))
    names = [n for n in actions.column_names if n.startswith("partition.")]
    partitions = [[partition_text(v) for v in actions.column(n).to_pylist()] for n in names]
    keys = [n.removeprefix("partition.") for n in names]
    return [
        Candidate(
            path=path,
            size=size,
            modification_ms=modified,
            partition=tuple(zip(keys, (p[i] for p in partitions), strict=True)),
        )
        for i, (path, size, modified) in enumerate(
            zip(
                actions.column("path").to_pylist(),
                actions.column("size_bytes").to_pylist(),
                actions.column("modification_time").to_pylist(),
                strict=True,
            )
        )
    ]


def plan(
    files: Iterable[Candidate],
    *,
    group_input_bytes: int = GROUP_INPUT_BYTES,
    include: Callable[[dict[str, str | None]], bool] | None = None,
    older_than_ms: int | None = None,
) -> list[list[Candidate]]:
    """Groups of files to rewrite together: one partition each, input ≤ `group_input_bytes`.

    Files this module wrote, files of that size or more, files not passing `include` (given
    the partition values) and files written at or after `older_than_ms` (epoch ms) are left.
    A group of one file is dropped (rewriting it alone gains little).
    """
    by_partition: dict[tuple[tuple[str, str | None], ...], list[Candidate]] = defaultdict(list)
    for file in files:
        if file.size >= group_input_bytes or _clustered(file.path):
            continue
        if older_than_ms is not None and file.modification_ms >= older_than_ms:
            continue
        if include is not None and not include(dict(file.partition)):
            continue
        by_partition[file.partition].append(file)
    groups: list[list[Candidate]] = []
    for members in by_partition.values():
        members.sort(key=lambda f: f.modification_ms)  # oldest first: neighbours in time
        group: list[Candidate] = []
        size = 0
        for file in members:
            if group and size + file.size > group_input_bytes:
                groups.append(group)
                group, size = [], 0
            group.append(file)
            size += file.size
        groups.append(group)
    return [g for g in groups if len(g) > 1]


def _clustered(path: str) -> bool:
    return path.rsplit("/", 1)[-1].startswith(CLUSTERED_PREFIX)


def compact(
    delta: DeltaTable,
    layout: Layout,
    options: RewriteOptions,
    *,
    include: Callable[[dict[str, str | None]], bool] | None = None,
    older_than_ms: int | None = None,
) -> CompactionResult:
    """Plan and rewrite every group, one commit per group (a lost race costs one group).

    Files are read as Parquet, so a table whose files need more than that to read (deletion
    vectors or column mapping, e.g. turned on by a user's Spark) is left to delta-rs."""
    total = CompactionResult()
    if not plain_parquet(delta):
        # said every round: without it, today's small files piled up with no word of why
        log.warning(
            "compaction skips %s: its files need deletion vectors or column mapping applied "
            "to be read (turned on by another writer, e.g. Spark); closed days are left to "
            "delta-rs's optimize, today's files stay as written until the feature is dropped",
            delta.table_uri,
        )
        return total
    groups = plan(
        candidates(delta),
        group_input_bytes=options.group_input_bytes,
        include=include,
        older_than_ms=older_than_ms,
    )
    if not groups:
        return total
    filesystem = table_filesystem(delta)
    for group in groups:
        total.add(rewrite(delta, group, layout, options, filesystem=filesystem))
    return total


def table_filesystem(delta: DeltaTable) -> pa_fs.FileSystem:
    """A pyarrow file system rooted at the table: pyarrow's own for a local table (delta-rs's
    is implemented in Python), delta-rs's (every object store it reaches) otherwise."""
    return (
        local_filesystem(delta.table_uri)
        or delta.to_pyarrow_dataset(file_pruning_predicate="false").filesystem
    )


@dataclass(frozen=True)
class Outputs:
    """How a rewrite of one partition's files writes its own: in the partition's directory,
    named CLUSTERED_PREFIX…, with the table's encodings at the compaction level and statistics
    where the log keeps them (compaction's file, and closed_days.py's)."""

    filesystem: pa_fs.FileSystem
    schema: pa.Schema  # the table's, without its partition columns
    directory: str
    partition_values: dict[str, str | None]
    encoding: dict[str, Any]  # ParquetWriter options
    with_stats: set[str] | None
    suffix: str

    @classmethod
    def of(
        cls,
        delta: DeltaTable,
        inputs: Sequence[Candidate],
        layout: Layout,
        options: RewriteOptions,
        filesystem: pa_fs.FileSystem,
    ) -> Outputs:
        partition_columns = set(delta.metadata().partition_columns)
        schema = pa.schema(
            [f for f in pa.schema(delta.schema().to_arrow()) if f.name not in partition_columns]
        )
        # paths as delta-rs takes them in actions: decoded (the log holds them
        # percent-encoded, and delta-rs encodes what it is given; an encoded path would name
        # another file)
        first = unquote(inputs[0].path)
        with_stats = stats_columns(delta)
        return cls(
            filesystem=filesystem,
            schema=schema,
            directory=first.rsplit("/", 1)[0] if "/" in first else "",
            partition_values=dict(inputs[0].partition),
            encoding=parquet_options(
                layout,
                schema,
                options.compression,
                options.compression_level,
                with_stats,
                clustered=True,
            ),
            with_stats=with_stats,
            suffix=options.compression.lower(),
        )

    def new_path(self) -> str:
        name = f"{CLUSTERED_PREFIX}{uuid.uuid4()}.{self.suffix}.parquet"
        return f"{self.directory}/{name}" if self.directory else name

    def writer(self, sink: Any, collector: list[pq.FileMetaData]) -> pq.ParquetWriter:
        """A Parquet writer into `sink` that leaves the file's footer in `collector`."""
        return pq.ParquetWriter(sink, self.schema, metadata_collector=collector, **self.encoding)

    def add_action(self, relative: str, metadata: pq.FileMetaData) -> AddAction:
        """The Add action of a file written at `relative`, with its footer `metadata`: the
        same rows as before, so not a data change."""
        written = DataFile(
            path=relative,
            size=self.filesystem.get_file_info(relative).size,
            partition_values=self.partition_values,
            stats=footer_stats(metadata, self.schema, self.with_stats),
            rows=metadata.num_rows,
        )
        return written.add_action(int(time.time() * 1000), data_change=False)


def rewrite(
    delta: DeltaTable,
    group: Sequence[Candidate],
    layout: Layout,
    options: RewriteOptions,
    *,
    filesystem: pa_fs.FileSystem | None = None,
) -> CompactionResult:
    """Rewrite one group as one sorted file and commit the swap (see the module docstring)."""
    filesystem = filesystem or table_filesystem(delta)
    outputs = Outputs.of(delta, group, layout, options, filesystem)
    rows = pa.concat_tables(
        [read_rows(filesystem, unquote(f.path), outputs.schema) for f in group],
        promote_options="default",
    )
    rows = cluster_rows(rows, layout, options.row_group_rows)
    # one file: a group's input is a fraction of the target file size
    relative = outputs.new_path()
    collector: list[pq.FileMetaData] = []
    with filesystem.open_output_stream(relative) as sink:
        writer = outputs.writer(sink, collector)
        writer.write_table(rows, row_group_size=options.row_group_rows)
        writer.close()
    add = outputs.add_action(relative, collector[0])
    commit_swap(delta, filesystem, group, [add], options)
    return CompactionResult(
        files_removed=len(group),
        files_added=1,
        rows=rows.num_rows,
        bytes_removed=sum(f.size for f in group),
        bytes_added=add.size,
    )


def commit_swap(
    delta: DeltaTable,
    filesystem: pa_fs.FileSystem,
    inputs: Sequence[Candidate],
    outputs: Sequence[AddAction],
    options: RewriteOptions,
) -> None:
    """One commit that removes `inputs` and adds `outputs` (files already written, the same
    rows), dataChange=false. If it fails, the outputs are deleted (`_discard_unless_committed`)
    and the error raised.

    delta-rs does not fail a commit whose removes a concurrent rewrite already made
    (lakehouse.rewrite_transaction): so the log is read again first, an input no longer live
    (another replica's compaction, a delete, retention) fails the swap here, and from that
    version on the commit carries the rewrites' own `txn`, so any rewrite landing before it
    fails it too (and every later group of this round commits on the version its previous
    group made). Neither check reaches delta-rs's own rewrites (bin-packing, Z-order), so the
    swap commits only while this process holds the table's maintenance lease (engines/lease.py;
    LeaseHeldError otherwise), and carries it: if the lease ran out during the rewrite and
    another process took it, the swap fails."""
    now_ms = int(time.time() * 1000)
    removes = [
        RemoveAction(
            path=unquote(f.path),
            data_change=False,
            deletion_timestamp=now_ms,
            size=f.size,
            partition_values=dict(f.partition),
        )
        for f in inputs
    ]
    try:
        root = local_path(delta.table_uri)
        if root is not None:  # on the disk before the log names them (otel_delta/disk.py)
            sync_files(root, [root / add.path for add in outputs])
        LEASES.hold(delta, options.lease_seconds)  # brings `delta` up to date too
        live = {c.path for c in candidates(delta)}
        if gone := [f for f in inputs if f.path not in live]:
            raise ConcurrentModificationError(
                delta.metadata().name or delta.table_uri,
                delta.version(),
                1,
                f"a concurrent commit removed {len(gone)} of the {len(inputs)} files this "
                "rewrite replaces (another compaction, a delete or retention)",
            )
        commit_actions(
            delta,
            [*removes, *outputs],
            CommitProperties(
                max_commit_retries=options.max_commit_retries,
                # and the lease: another process's lease landing meanwhile fails the swap
                app_transactions=[
                    txn for txn in (rewrite_transaction(), LEASES.transaction(delta)) if txn
                ],
                custom_metadata=commit_info(
                    "compaction",
                    {"num_added_files": len(outputs), "num_removed_files": len(inputs)},
                ),
            ),
        )
    except BaseException:
        _discard_unless_committed(delta, filesystem, [add.path for add in outputs])
        raise


def _discard_unless_committed(
    delta: DeltaTable, filesystem: pa_fs.FileSystem, written: Sequence[str]
) -> None:
    """Delete the files of a failed commit, unless the commit did land after all (an answer
    lost on the way back from an object store): the log is read again before deleting, and a
    file whose fate is unknown is left (unreferenced, it harms nothing, and the next vacuum
    removes it): said in one line, beside the error being raised, which is the one to report."""
    try:
        delta.update_incremental()
        live = {unquote(c.path) for c in candidates(delta)}
        for relative in written:
            if relative not in live:
                filesystem.delete_file(relative)
    except Exception as exc:
        log.warning(
            "compaction left %d file(s) its failed commit wrote (vacuum removes them): %s",
            len(written),
            describe(exc),
        )


def read_rows(filesystem: pa_fs.FileSystem, path: str, schema: pa.Schema) -> pa.Table:
    """A file's rows in the table schema (`conform`)."""
    # ParquetFile, not pq.read_table: that goes through pyarrow.dataset, whose import loads
    # pandas into the bridge (otel_delta/nopandas.py)
    with filesystem.open_input_file(path) as file:
        return conform(pq.ParquetFile(file).read(), schema)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows read from a file in the table schema: columns added since it was written come
    back null; string_view and large types written by other writers are cast to the table's."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def cluster_rows(rows: pa.Table, layout: Layout, row_group_rows: int) -> pa.Table:
    """The rows sorted by the layout's cluster key, then, within each row group's share of
    them, the runs of the key's first column (a trace's spans or log records, a metric's
    points) put in the order of their first time (`_runs_in_time_order`)."""
    keys = [(c, "ascending") for c in layout.cluster_columns if c in rows.column_names]
    if not keys or rows.num_rows < 2:
        return rows
    order = pc.sort_indices(rows, sort_keys=keys).to_numpy()
    if len(keys) > 1:
        first, then = keys[0][0], keys[1][0]
        ordered = rows.select([first, then]).take(order)
        order = order[_runs_in_time_order(ordered, first, then, row_group_rows)]
    return rows.take(order)


def _runs_in_time_order(rows: pa.Table, key: str, time_: str, row_group_rows: int) -> np.ndarray:
    """A permutation of `rows`, sorted by (key, time), that keeps each row group's set of rows
    (so its key range, which a lookup prunes by, stays as narrow) and each run of one key
    together in its time order, but orders the runs inside a row group by their first time.

    Why: neighbouring rows then have neighbouring times, where sorted by trace id the next
    trace starts anywhere in the day. bench/storage.py (2026-11-26): spans 35.3 -> 34.5 B,
    log records 34.0 -> 31.9 B, with the times DELTA_BINARY_PACKED (layout.py)."""
    n = rows.num_rows
    position = np.arange(n)
    group = position // row_group_rows
    starts = np.zeros(n, dtype=bool)  # a run starts at a change of key or of row group
    starts[run_starts(rows, [key])] = True
    starts[1:] |= group[1:] != group[:-1]
    run = np.cumsum(starts) - 1
    first = pc.fill_null(rows[time_], 0).to_numpy(zero_copy_only=False)[starts][run]
    # last key first: row group, run's first time, run (ties keep key order), position
    return np.lexsort((position, run, first, group))
