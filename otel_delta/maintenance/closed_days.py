"""A closed day's partitions sorted by the cluster key (trace id) across their files, so that a
trace lookup opens one file per partition, found by the log's statistics.

While a day is open, today's compaction (compaction.py) leaves one or more sorted files per
maintenance round, and late data may add more: their trace id ranges overlap. Once the day is
over, each such partition is rewritten in one commit (dataChange=false, as compaction commits)
as files of about `target_size` whose ranges are disjoint:

- **With our writer** (`sort_partition`), which writes the files as today's compaction does:
  the layout's encodings, statistics only where the log keeps them, each row group's traces
  in the order of their first span. A distribution sort in two passes over the partition, in
  bounded memory: the cluster key of every file is sampled for bucket boundaries, each file
  is read a batch at a time and its rows spilled to their bucket's Arrow IPC file (zstd) in a
  local temporary directory, then the buckets, in key order, are each sorted in memory and
  appended as row groups to the current output file. A bucket holds about
  `RewriteOptions.group_input_bytes` of input, the memory today's compaction sorts at once;
  a partition no larger than one bucket is read and sorted in memory, without spill files.
- **With delta-rs's Z-order** on the one column (it spills its sort beyond `max_spill_bytes`)
  where our reader cannot take the files as plain Parquet (deletion vectors, column mapping)
  or a partition would need more than MAX_BUCKETS buckets. Its writer's files are larger:
  bench/storage.py (2026-11-26), the closed day of the corpus 38.6 B per span and 35.9 per
  log record against 34.5 and 31.9 for today's compaction of the same rows.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
from deltalake import DeltaTable, WriterProperties
from deltalake.transaction import AddAction, CommitProperties

from otel_delta.disk import local_path, sync_commit
from otel_delta.engines.data_files import plain_parquet
from otel_delta.engines.lease import LEASES
from otel_delta.faults import pause_point
from otel_delta.ipc import read_spill, spill_writer
from otel_delta.lakehouse import column_properties
from otel_delta.maintenance.compaction import (
    Candidate,
    CompactionResult,
    Outputs,
    RewriteOptions,
    candidates,
    cluster_rows,
    commit_swap,
    conform,
    read_rows,
    table_filesystem,
)
from otel_delta.tables.layout import Layout

MAX_SPILL_BYTES = 256 * 1024 * 1024  # memory of delta-rs's sort before it spills
# buckets of one partition's sort (each a spill file open at once): 2 GiB of input at the
# default 8 MiB per bucket; a larger partition is left to delta-rs's Z-order
MAX_BUCKETS = 256
SAMPLES_PER_BUCKET = 256  # cluster keys sampled per bucket to place the boundaries
SPILL_BATCH_ROWS = 32 * 1024  # rows read from an input file at a time
LAST = 2**63  # sorts after every time: a null time (pyarrow sorts nulls last)

Key = tuple[str, int]  # (first cluster column, second), as a boundary between buckets


def unclustered_partitions(
    delta: DeltaTable, column: str, include: Callable[[dict[str, str | None]], bool]
) -> list[tuple[dict[str, str], list[Candidate]]]:
    """Partitions passing `include` whose files' `column` ranges overlap (from the log's
    statistics), each with its files: after clustering a partition's files hold disjoint
    ranges, so a partition is clustered again only when files were added to it since (late
    data, a backfill)."""
    actions = pa.table(delta.get_add_actions(flatten=True))
    if f"min.{column}" not in actions.column_names:
        return []
    files: dict[tuple[tuple[str, str | None], ...], list[Candidate]] = defaultdict(list)
    ranges: dict[tuple[tuple[str, str | None], ...], list[tuple[Any, Any]]] = defaultdict(list)
    for file, low, high in zip(
        candidates(delta),
        actions.column(f"min.{column}").to_pylist(),
        actions.column(f"max.{column}").to_pylist(),
        strict=True,
    ):
        values = dict(file.partition)
        if include(values) and None not in values.values():
            files[file.partition].append(file)
            ranges[file.partition].append((low, high))
    chosen = []
    for partition, spans in ranges.items():
        if len(spans) < 2:
            continue
        if any(low is None or high is None for low, high in spans):
            chosen.append(partition)  # a file without statistics: cannot tell
            continue
        spans.sort()
        if any(spans[i][0] < spans[i - 1][1] for i in range(1, len(spans))):
            chosen.append(partition)
    return [({k: v for k, v in p if v is not None}, files[p]) for p in chosen]


def cluster_partitions(
    delta: DeltaTable,
    layout: Layout,
    options: RewriteOptions,
    *,
    include: Callable[[dict[str, str | None]], bool],
    target_size: int,
    max_spill_bytes: int = MAX_SPILL_BYTES,
) -> CompactionResult:
    """Sort each unclustered partition passing `include` by the layout's cluster key across
    all its files, into files of about `target_size` with disjoint ranges of its first column
    (see the module docstring for which writer). `partitions` of the result counts the
    partitions clustered."""
    done = CompactionResult()
    if not layout.cluster_columns:
        return done
    column = layout.cluster_columns[0]
    own = plain_parquet(delta) and len(layout.cluster_columns) >= 2
    for values, files in unclustered_partitions(delta, column, include):
        if own and _buckets(files, options, target_size) <= MAX_BUCKETS:
            result = sort_partition(delta, files, layout, options, target_size=target_size)
        else:
            result = _z_order(delta, values, column, layout, options, target_size, max_spill_bytes)
        done.partitions += 1
        done.add(result)
    return done


def _z_order(
    delta: DeltaTable,
    values: dict[str, str],
    column: str,
    layout: Layout,
    options: RewriteOptions,
    target_size: int,
    max_spill_bytes: int,
) -> CompactionResult:
    """delta-rs's Z-order of one partition by `column`. Its commit cannot carry the lease
    (engines/lease.py), so the lease is renewed while it runs, however long the partition takes;
    taken first, so that it stays held after, as the maintainer keeps it across rounds."""
    LEASES.hold(delta, options.lease_seconds)
    properties = WriterProperties(
        compression=options.compression,  # type: ignore[arg-type]
        compression_level=options.compression_level,
        max_row_group_size=options.row_group_rows,
        column_properties=column_properties(layout, clustered=True),
    )
    with LEASES.holding(delta, options.lease_seconds):
        pause_point("z-order-leased")
        metrics = delta.optimize.z_order(
            [column],
            partition_filters=[(k, "=", v) for k, v in values.items()],
            target_size=target_size,
            max_spill_size=max_spill_bytes,
            writer_properties=properties,
            commit_properties=CommitProperties(max_commit_retries=options.max_commit_retries),
        )
    root = local_path(delta.table_uri)
    if root is not None and int(metrics.get("numFilesAdded", 0)):
        # delta-rs fsyncs nothing: its files on the disk now, not when the kernel gets to them
        # (its log entry may get there first: delta-rs's rewrites, unlike compaction's own,
        # cannot put the files on the disk before the entry that names them)
        sync_commit(root, delta.version())
    return CompactionResult(
        files_removed=int(metrics.get("numFilesRemoved", 0)),
        files_added=int(metrics.get("numFilesAdded", 0)),
    )


def _buckets(files: Sequence[Candidate], options: RewriteOptions, target_size: int) -> int:
    """Buckets of about `group_input_bytes` of input each (the memory one takes to sort), and
    smaller than a target-size file (output files end between buckets)."""
    per_bucket = max(1, min(options.group_input_bytes, target_size))
    return max(1, math.ceil(sum(f.size for f in files) / per_bucket))


def sort_partition(
    delta: DeltaTable,
    files: Sequence[Candidate],
    layout: Layout,
    options: RewriteOptions,
    *,
    target_size: int,
    filesystem: pa_fs.FileSystem | None = None,
) -> CompactionResult:
    """Rewrite `files` (one partition's) sorted by the layout's two cluster columns, as files
    of about `target_size`, and commit the swap (see the module docstring)."""
    filesystem = filesystem or table_filesystem(delta)
    outputs = Outputs.of(delta, files, layout, options, filesystem)
    first, then = layout.cluster_columns[:2]
    paths = [unquote(f.path) for f in files]
    buckets = _buckets(files, options, target_size)
    if buckets == 1:  # fits in memory at once: no spill files
        whole = [read_rows(filesystem, path, outputs.schema) for path in paths]
        adds, rows = _write_sorted(outputs, layout, options, [whole], target_size)
    else:
        boundaries = _boundaries(filesystem, paths, first, then, buckets)
        with tempfile.TemporaryDirectory(prefix="otel-delta-sort-") as spill:
            spilled = _spill(
                filesystem, paths, outputs.schema, first, then, boundaries, Path(spill)
            )
            adds, rows = _write_sorted(outputs, layout, options, spilled, target_size)
    commit_swap(delta, filesystem, files, adds, options)
    return CompactionResult(
        files_removed=len(files),
        files_added=len(adds),
        rows=rows,
        bytes_removed=sum(f.size for f in files),
        bytes_added=sum(add.size for add in adds),
    )


@contextlib.contextmanager
def _parquet(filesystem: pa_fs.FileSystem, path: str) -> Iterator[pq.ParquetFile]:
    """One input file, closed when done: a partition may have thousands."""
    with filesystem.open_input_file(path) as file:
        yield pq.ParquetFile(file)


def _boundaries(
    filesystem: pa_fs.FileSystem, paths: Sequence[str], first: str, then: str, buckets: int
) -> list[Key]:
    """`buckets - 1` keys that cut the partition's rows into about equal buckets: quantiles of
    an evenly spaced sample of its (first, then) cluster keys (nulls, which sort last, left out).

    One pass, each file opened once (on an object store, a footer read each): the sample takes
    every `stride`-th row of the partition, and once it holds twice the rows it needs, the
    stride doubles and the rows it took that are not on the new stride are dropped."""
    if buckets < 2:
        return []
    wanted = buckets * SAMPLES_PER_BUCKET
    stride = 1
    position = 0  # rows of the partition before the current batch
    sample: list[tuple[int, Key]] = []  # (row number in the partition, key)
    for path in paths:
        with _parquet(filesystem, path) as reader:
            names = set(reader.schema_arrow.names)
            if first not in names:  # a file from before the column existed: all nulls
                position += reader.metadata.num_rows
                continue
            columns = [first, *([then] if then in names else [])]
            for batch in reader.iter_batches(batch_size=SPILL_BATCH_ROWS, columns=columns):
                rows = np.arange(-position % stride, batch.num_rows, stride)
                picked = batch.take(pa.array(rows))
                firsts = picked.column(first).to_pylist()
                thens = picked.column(then).to_pylist() if then in names else [None] * len(rows)
                sample.extend(
                    (position + int(row), _key(k, t))
                    for row, k, t in zip(rows, firsts, thens, strict=True)
                    if k is not None
                )
                position += batch.num_rows
                while len(sample) > 2 * wanted:
                    stride *= 2
                    sample = [taken for taken in sample if taken[0] % stride == 0]
    keys = sorted(key for _, key in sample)
    cuts = {keys[len(keys) * i // buckets] for i in range(1, buckets)} if keys else set()
    return sorted(cuts)


def _key(first: Any, time_: Any) -> Key:
    """A row's comparable key (its first column not null), ordered as pyarrow sorts."""
    return (first, LAST if time_ is None else time_)


class _SortedKeys(Sequence[Key]):
    """The keys of sorted rows as `bisect` reads them: only the few it looks at are made
    Python objects (not every row's)."""

    def __init__(self, rows: pa.Table, first: str, then: str) -> None:
        self._first = rows.column(first).combine_chunks()
        self._then = rows.column(then).combine_chunks()
        self._length = rows.num_rows - self._first.null_count  # nulls sort last: left out

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int):
            raise TypeError("one key at a time")
        return _key(self._first[index].as_py(), self._then[index].as_py())


def _spill(
    filesystem: pa_fs.FileSystem,
    paths: Sequence[str],
    schema: pa.Schema,
    first: str,
    then: str,
    boundaries: list[Key],
    directory: Path,
) -> list[Path]:
    """Each file's rows, a batch at a time, appended to the spill file of their bucket; the
    spill files in bucket order (those that got rows)."""
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    sort_keys = [(first, "ascending"), (then, "ascending")]

    def append(bucket: int, rows: pa.Table) -> None:
        if bucket not in writers:
            writers[bucket] = spill_writer(directory / f"{bucket:05d}.arrow", schema)
        writers[bucket].write_table(rows)

    try:
        for path in paths:
            with _parquet(filesystem, path) as reader:
                for batch in reader.iter_batches(batch_size=SPILL_BATCH_ROWS):
                    rows = conform(pa.Table.from_batches([batch]), schema)
                    rows = rows.take(pc.sort_indices(rows, sort_keys=sort_keys))
                    keys = _SortedKeys(rows, first, then)
                    cuts = [0, *(bisect.bisect_left(keys, b) for b in boundaries), rows.num_rows]
                    for bucket, (start, end) in enumerate(itertools.pairwise(cuts)):
                        if end > start:
                            append(bucket, rows.slice(start, end - start))
    finally:
        for writer in writers.values():
            writer.close()
    return [directory / f"{bucket:05d}.arrow" for bucket in sorted(writers)]


def _write_sorted(
    outputs: Outputs,
    layout: Layout,
    options: RewriteOptions,
    buckets: Sequence[Path | list[pa.Table]],
    target_size: int,
) -> tuple[list[AddAction], int]:
    """The buckets (spill files, or rows in memory), in order, each sorted, as row groups of
    files of about `target_size` (a file ends where the next bucket, if as large as the last,
    would take it past the target); their add actions and the rows written. A failure deletes
    what it wrote."""
    filesystem = outputs.filesystem
    adds: list[AddAction] = []
    written: list[str] = []
    rows = 0
    sink: Any = None
    writer: pq.ParquetWriter | None = None
    collector: list[pq.FileMetaData] = []

    def finish() -> None:
        nonlocal sink, writer
        assert writer is not None and sink is not None
        writer.close()
        sink.close()
        adds.append(outputs.add_action(written[-1], collector.pop()))
        sink = writer = None

    try:
        for spilled in buckets:
            if isinstance(spilled, Path):
                bucket = read_spill(spilled)
            else:
                bucket = pa.concat_tables(spilled, promote_options="default")
                spilled.clear()  # the sorted copy replaces them
            bucket = cluster_rows(bucket, layout, options.row_group_rows)
            if writer is None:
                written.append(outputs.new_path())
                sink = filesystem.open_output_stream(written[-1])
                writer = outputs.writer(sink, collector)
            before = sink.tell()
            writer.write_table(bucket, row_group_size=options.row_group_rows)
            rows += bucket.num_rows
            del bucket
            if sink.tell() + (sink.tell() - before) > target_size:
                finish()
        if writer is not None:
            finish()
    except BaseException:
        if writer is not None:
            writer.close()
            sink.close()
        for relative in written:
            with contextlib.suppress(OSError):  # unreferenced by the log, it harms nothing
                filesystem.delete_file(relative)
        raise
    return adds, rows
