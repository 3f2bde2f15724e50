"""Parquet data files that our own code writes and delta-rs then commits as Add actions.

Three writers use this: the bridge's appends (engines/delta_rs, wherever the table has no
CHECK constraint, column mapping or deletion vectors), the stream's executors, which write
each micro-batch's rows where they convert them (one Spark job per batch, no rows through the
JVM; the driver commits the files of each table in one delta-rs commit carrying the batch's
transaction), and the clustered compaction of today's partition. All write with the table's
layout (otel_delta.tables.layout) and describe a file to the log as delta-rs does: statistics
from the footer for the table's statistics columns, timestamps in milliseconds, strings over
MAX_STRING_STAT characters left out.

Partitioned rows go to Hive-style directories (`service_name=<value>/date=<value>/`), a value
escaped as Hive and Spark escape it; delta-rs percent-encodes the path once more for the log
(the Delta protocol's `path` is a URI), which readers decode.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
from deltalake.transaction import AddAction, RemoveAction

from otel_delta.disk import local_path
from otel_delta.lakehouse import STATS_COLUMNS
from otel_delta.tables.dictionary_types import has_dictionary
from otel_delta.tables.layout import Layout, bloom_filter_options, parquet_options
from otel_delta.tables.packed import DICTIONARY_MIN_ROWS, plain_schema, unpack

MAX_STRING_STAT = 64  # longer string min/max are left out of the log (ids and names fit)
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the directory of a null partition value
# Below this many rows a chunk, a partition's chunks are joined before they are written (see
# `_joined_for_writer`)
JOIN_CHUNKS_BELOW_ROWS = 1_024
# characters Hive (and Spark) escape as %XX in a partition directory name
_HIVE_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^")


@dataclass(frozen=True)
class DataFile:
    """A written file, as its Add action will describe it."""

    # relative to the table, not percent-encoded: delta-rs encodes an action's path for the log
    path: str
    size: int
    partition_values: dict[str, str | None]
    stats: str  # Delta statistics JSON
    rows: int

    def add_action(self, modification_time_ms: int, data_change: bool = True) -> AddAction:
        return AddAction(
            path=self.path,
            size=self.size,
            partition_values=self.partition_values,
            modification_time=modification_time_ms,
            data_change=data_change,
            stats=self.stats,
        )


def commit_actions(
    delta: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    properties: CommitProperties,
    hooks: PostCommitHookProperties | None = None,
) -> None:
    """One commit of these actions (the Add actions of files written here, and for a
    compaction the Remove actions of the files they replace), in the table's schema and
    partitioning: the bridge's appends, the stream's batches and compaction commit so."""
    delta.create_write_transaction(
        list(actions),
        mode="append",
        schema=delta.schema(),
        partition_by=list(delta.metadata().partition_columns) or None,
        commit_properties=properties,
        post_commithook_properties=hooks,
    )


def added(files: Sequence[DataFile]) -> dict[str, int]:
    """A commit's operation metrics for these files, named as delta-rs names them."""
    return {"num_added_files": len(files), "num_added_rows": sum(f.rows for f in files)}


def local_filesystem(uri: str) -> pa_fs.SubTreeFileSystem | None:
    """pyarrow's local file system rooted at `uri` (a path or a file:// URI), None for any
    other store: pyarrow's is native, delta-rs's is implemented in Python."""
    path = local_path(uri)
    return None if path is None else pa_fs.SubTreeFileSystem(str(path), pa_fs.LocalFileSystem())


def table_filesystem(
    uri: str, storage: dict[str, str] | None, create: bool = True
) -> pa_fs.FileSystem:
    """A pyarrow file system rooted at the table `uri`: pyarrow's own for a local path,
    delta-rs's object store (every store it reaches, with the same options) otherwise. With
    `create`, for writing, a local table's directory is made first (a table not created yet:
    its files come before its log)."""
    local = local_filesystem(uri)
    if local is not None:
        if create:
            local.base_fs.create_dir(local.base_path, recursive=True)
        return local
    from deltalake.fs import DeltaStorageHandler

    return pa_fs.PyFileSystem(DeltaStorageHandler(uri, storage or None))


def stats_columns(delta: DeltaTable) -> set[str] | None:
    """The columns the table records statistics of (`delta.dataSkippingStatsColumns`), or
    None for every column."""
    named = delta.metadata().configuration.get(STATS_COLUMNS)
    return {c.strip() for c in named.split(",")} if named else None


def has_deletion_vectors(delta: DeltaTable) -> bool:
    """Does the table ask its readers to apply deletion vectors? A Spark user's DELETE writes
    them once they turned them on (`delta.enableDeletionVectors`); delta-rs 1.6.6 applies them
    in DataFusion only, and its pyarrow dataset refuses such a table (reading the files as they
    are would return the deleted rows)."""
    return "deletionVectors" in (delta.protocol().reader_features or [])


def plain_parquet(delta: DeltaTable) -> bool:
    """Are the table's files its rows as plain Parquet (no deletion vectors, no column
    mapping)?"""
    features = delta.protocol().reader_features or []
    mapping = delta.metadata().configuration.get("delta.columnMapping.mode") or "none"
    return not has_deletion_vectors(delta) and "columnMapping" not in features and mapping == "none"


def not_appendable(delta: DeltaTable) -> str | None:
    """Why files written here must not be added to the table as they are (None: they may):
    column mapping stores other column names, and a CHECK constraint would go unchecked."""
    configuration = delta.metadata().configuration
    mapping = configuration.get("delta.columnMapping.mode") or "none"
    if mapping != "none" or "columnMapping" in (delta.protocol().reader_features or []):
        return "it uses column mapping"
    constraints = sorted(
        k.removeprefix("delta.constraints.")
        for k in configuration
        if k.startswith("delta.constraints.")
    )
    if constraints:
        return f"it has CHECK constraints ({', '.join(constraints)})"
    return None


def hive_escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED or ord(c) < 0x20 else c for c in value)


def partition_text(value: Any) -> str | None:
    """A partition value as the Delta log holds it (dates ISO, everything else its text)."""
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def write_partitioned(
    rows: pa.Table,
    schema: pa.Schema,
    partition_by: Sequence[str],
    filesystem: pa_fs.FileSystem,
    layout: Layout,
    compression: str,
    compression_level: int,
    columns_with_stats: set[str] | None,
    pool: Executor | None = None,
    place: Callable[[], Executor | None] | None = None,
) -> list[DataFile]:
    """Write `rows` (in the table `schema`, partition columns included) as one file per
    partition, in the order the rows came; returns the files' descriptions. With a `pool`,
    the files are encoded on its threads at once (pyarrow lets go of the GIL meanwhile).
    Otherwise one after another, each on the executor `place` names as it begins (the
    calling thread when it names none or there is no `place`)."""
    # the files' columns in the table's types (`schema` may be of packed rows)
    data_schema = plain_schema(pa.schema([f for f in schema if f.name not in partition_by]))
    suffix = compression.lower()

    @cache
    def options(written: pa.Schema) -> dict[str, Any]:
        return parquet_options(layout, written, compression, compression_level, columns_with_stats)

    def write(values: dict[str, str | None], part: pa.Table) -> DataFile:
        directory = "/".join(
            f"{name}={HIVE_NULL if value is None else hive_escape(value)}"
            for name, value in values.items()
        )
        name = f"part-{uuid.uuid4()}.{suffix}.parquet"
        relative = f"{directory}/{name}" if directory else name
        data = part.select(data_schema.names)
        if data.num_rows < DICTIONARY_MIN_ROWS:
            data = unpack(data)  # a small file: see tables/packed.py
        if not plain_schema(data.schema).equals(data_schema):
            data = data.cast(data_schema)
        data = _joined_for_writer(data)
        if directory:
            filesystem.create_dir(directory, recursive=True)
        collector: list[pq.FileMetaData] = []
        with filesystem.open_output_stream(relative) as sink:
            writer = pq.ParquetWriter(
                sink,
                data.schema,
                metadata_collector=collector,
                bloom_filter_options=bloom_filter_options(layout, data.schema, data.num_rows),
                **options(data.schema),
            )
            writer.write_table(data)
            writer.close()
        metadata = collector[0] if collector else footer(filesystem, relative)
        return DataFile(
            path=relative,
            size=filesystem.get_file_info(relative).size,
            partition_values=values,
            stats=footer_stats(metadata, data_schema, columns_with_stats),
            rows=data.num_rows,
        )

    def write_placed(values: dict[str, str | None], part: pa.Table) -> DataFile:
        executor = place() if place is not None else None
        if executor is None:
            return write(values, part)
        return executor.submit(write, values, part).result()

    parts = _partitions(rows, partition_by)
    if pool is None or len(parts) < 2:
        return [write_placed(values, part) for values, part in parts]
    return list(pool.map(lambda item: write(*item), parts))


def _joined_for_writer(data: pa.Table) -> pa.Table:
    """`data` with the chunks joined where pyarrow's Parquet writer would pay for them.

    A partition's rows come as one chunk per request. Packed columns (tables/packed.py) bring
    a dictionary per request, and the writer keeps a column chunk's first dictionary and, when
    a later chunk brings another, writes the rest of the column chunk PLAIN from dense copies:
    so each packed column is joined into one chunk (its dictionaries unified and the indices
    remapped; no string is copied). And the writer pays per chunk and Parquet leaf (levels,
    the dictionary check, validation): when chunks are small, every column is joined (a copy
    of the partition). One thread writing commits of 20 of the Collector-like load's requests,
    each listing its services in an order of its own, as a Collector's batches do, with the
    bridge's system allocator (median us per item, as they came / packed columns joined / all
    joined): metrics (a request's 8,192 points shared by 3 tables and 5 services, ~550 rows a
    chunk) 1.90 / 1.61 / 1.52; spans 2.72 / 2.57 / 2.56 and logs 1.59 / 1.47 / 1.48 (~1,600
    rows a chunk)."""
    chunks = max((column.num_chunks for column in data.columns), default=0)
    if chunks <= 1:
        return data
    if data.num_rows < chunks * JOIN_CHUNKS_BELOW_ROWS:
        return data.combine_chunks()
    for index, field in enumerate(data.schema):
        if has_dictionary(field.type) and data.column(index).num_chunks > 1:
            data = data.set_column(index, field, data.column(index).combine_chunks())
    return data


def _partitions(
    rows: pa.Table, partition_by: Sequence[str]
) -> list[tuple[dict[str, str | None], pa.Table]]:
    """The rows of each partition, in the order they came. Rows arrive in runs of one
    partition (a request's rows share a resource, and mostly a date), so the rows are cut at
    the changes into slices, which cost no copy, and each partition's slices are joined."""
    if not rows.num_rows:
        return []
    if not partition_by:
        return [({}, rows)]
    starts = run_starts(rows, partition_by)
    slices: dict[tuple, list[pa.Table]] = {}
    for start, end in zip(starts, [*starts[1:], rows.num_rows], strict=True):
        key = tuple(rows[name][start].as_py() for name in partition_by)
        slices.setdefault(key, []).append(rows.slice(start, end - start))
    return [
        (
            {name: partition_text(value) for name, value in zip(partition_by, key, strict=True)},
            parts[0] if len(parts) == 1 else pa.concat_tables(parts),
        )
        for key, parts in slices.items()
    ]


def run_starts(rows: pa.Table, columns: Sequence[str]) -> list[int]:
    """The first row of each run of rows with the same values in `columns` (a null differs
    from its neighbour: it starts a run)."""
    n = rows.num_rows
    changed = None
    for name in columns:
        column = rows[name]
        step = pc.fill_null(pc.not_equal(column.slice(1), column.slice(0, n - 1)), True)
        changed = step if changed is None else pc.or_(changed, step)
    if changed is None:
        return [0]
    return [0, *(pc.indices_nonzero(changed).to_numpy() + 1).tolist()]


def footer(filesystem: pa_fs.FileSystem, path: str) -> pq.FileMetaData:
    with filesystem.open_input_file(path) as source:
        return pq.ParquetFile(source).metadata


def footer_stats(
    metadata: pq.FileMetaData, schema: pa.Schema, columns: set[str] | None = None
) -> str:
    """Delta `stats` JSON of a file from its footer: row count, and per top-level scalar
    column (of `columns`, if given) its null count and, where every row group recorded them,
    min and max."""
    index = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in schema:
        if field.name not in index or not _scalar(field.type):
            continue
        if columns is not None and field.name not in columns:
            continue
        column = index[field.name]
        groups = [
            metadata.row_group(g).column(column).statistics for g in range(metadata.num_row_groups)
        ]
        if any(s is None for s in groups):
            continue
        nulls[field.name] = sum(s.null_count for s in groups)
        bounds = [(s.min, s.max) for s in groups if s.has_min_max]
        if not bounds or len(bounds) != sum(1 for s in groups if s.num_values):
            continue
        low, high = min(b[0] for b in bounds), max(b[1] for b in bounds)
        if isinstance(high, str) and max(len(low), len(high)) > MAX_STRING_STAT:
            continue
        if isinstance(high, float) and (high != high or low != low):  # NaN
            continue
        minimum[field.name] = _json_value(low, field.type)
        maximum[field.name] = _json_value(high, field.type)
    return json.dumps(
        {
            "numRecords": metadata.num_rows,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": nulls,
        },
        separators=(",", ":"),
    )


def _scalar(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_date(kind)
    )


def _json_value(value: Any, kind: pa.DataType) -> Any:
    if pa.types.is_timestamp(kind):
        if isinstance(value, int):
            value = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=value)
        # milliseconds, as delta-rs writes them (readers allow for the truncation), and like
        # delta-rs without a fraction when it is zero
        value = value.astimezone(dt.UTC)
        millis = value.microsecond // 1000
        fraction = f".{millis:03d}" if millis else ""
        return value.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
    if pa.types.is_date(kind):
        return value.isoformat()
    return value
