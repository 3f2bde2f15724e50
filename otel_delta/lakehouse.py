"""The lakehouse's facts, in one place every part of otel-delta reads them from.

Where the tables live (root URI and object-store options), how they are partitioned, how their
Parquet is encoded and their commits retried, how a table is created (schema, partitioning,
description, properties) and checked, the bookkeeping tables beside them (dead letters, the
audit, the backfill's ledger) and their appends that happen once, and how a SparkSession for
them is built. The receiver side, the engines, the connector, maintenance and backfill all
take a `Lakehouse`; this module imports nothing of theirs.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound

from otel_delta.config import Settings, SparkSettings, TableSettings
from otel_delta.disk import local_path, sync_commit
from otel_delta.errors import (
    CommitError,
    ConfigError,
    OtelDeltaError,
    TableNotFoundError,
    describe,
)
from otel_delta.tables import DEFAULT_PARTITION_BY, TABLES, Layout
from otel_delta.tables.layout import INGEST_LEVEL, column_encodings
from otel_delta.tables.schemas import BOOKKEEPING_TABLES
from otel_delta.tables.versions import SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# delta-rs object-store options (case-insensitive; with or without the AWS_ prefix) → S3A
S3A_OPTIONS = {
    "endpoint_url": "fs.s3a.endpoint",
    "endpoint": "fs.s3a.endpoint",
    "access_key_id": "fs.s3a.access.key",
    "secret_access_key": "fs.s3a.secret.key",
    "session_token": "fs.s3a.session.token",
    "region": "fs.s3a.endpoint.region",
}


def s3a_conf(options: dict[str, str]) -> dict[str, str]:
    """Spark settings that point S3A where delta-rs goes, with the same credentials."""
    conf: dict[str, str] = {}
    for key, value in options.items():
        name = key.lower().removeprefix("aws_")
        if name in S3A_OPTIONS:
            conf[f"spark.hadoop.{S3A_OPTIONS[name]}"] = value
        elif name == "allow_http" and value.lower() == "true":
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
        elif name == "virtual_hosted_style_request":
            conf["spark.hadoop.fs.s3a.path.style.access"] = str(value.lower() != "true").lower()
    if "spark.hadoop.fs.s3a.endpoint" in conf:  # S3-compatible stores: path-style by default
        conf.setdefault("spark.hadoop.fs.s3a.path.style.access", "true")
    return conf


def s3_filesystem(options: dict[str, str]) -> pafs.S3FileSystem:
    """A pyarrow S3 filesystem that reaches the store delta-rs reaches, with the same options
    (for what delta-rs has no call for, such as removing a whole table); credentials that are
    not in the options come from the usual AWS chain, as they do for delta-rs."""
    names = {key.lower().removeprefix("aws_"): value for key, value in options.items()}
    kwargs: dict[str, Any] = {}
    for name, argument in (
        ("access_key_id", "access_key"),
        ("secret_access_key", "secret_key"),
        ("session_token", "session_token"),
        ("region", "region"),
    ):
        if name in names:
            kwargs[argument] = names[name]
    endpoint = names.get("endpoint_url") or names.get("endpoint")
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        kwargs["endpoint_override"] = host or scheme
        kwargs["scheme"] = scheme if host else "https"
    if names.get("virtual_hosted_style_request", "").lower() == "true":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
LOG_RETENTION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION_HOURS = 720.0  # Delta's own default, 30 days
# how long the log keeps a removed file's tombstone (`file_retention_hours`); Delta's default
FILE_RETENTION = "delta.deletedFileRetentionDuration"
DEFAULT_FILE_RETENTION_HOURS = 168.0
MIN_FILE_RETENTION_HOURS = 24.0


def file_retention_hours(table: TableSettings) -> float:
    """How long the tables' logs keep removed files' tombstones.

    Every checkpoint carries the tombstones younger than this and every reader opening the
    table reads them: a compacted table's checkpoint is mostly tombstones (a day of 10 s
    flushes to 5 services compacts some 43,000 files away; a week of them, Delta's default,
    makes every open and every checkpoint read and write 300,000 rows; measured on a day of
    them, bench/long_run.py's table: an open took 58 ms, 2.7 ms of it without the tombstones).
    Vacuum deletes removed files once `retention_hours` old, from their tombstones
    (engines/vacuum.py), so the tombstones are kept that long plus two maintenance intervals:
    the vacuum due to delete a file still finds its tombstone, which any checkpoint drops once
    expired (a file whose tombstone is gone waits for the sweep of unreferenced files a week
    old). At least a day: other tools take this property as their default vacuum retention
    (Spark's VACUUM), and a shorter one could delete files of a commit still in flight.
    Delta's default where `retention_hours` is Delta's own."""
    if table.retention_hours == DEFAULT_FILE_RETENTION_HOURS:
        return DEFAULT_FILE_RETENTION_HOURS
    intervals = 2 * table.maintenance_interval_seconds / 3600
    return max(table.retention_hours, MIN_FILE_RETENTION_HOURS) + intervals


def log_retention_hours(table: TableSettings) -> float:
    """How long the tables' logs keep their entries (`delta.logRetentionDuration`): as set, or
    else as long as they keep removed files' tombstones (`file_retention_hours`), or Delta's 30
    days when nothing vacuums.

    A version older than that has had its compacted files vacuumed (continuous compaction
    removes every ingested file within its day), so its entries would serve `history` only,
    while every open lists them and the checkpoints among them (each carrying the tombstones)
    take the disk: at a 10 s flush a table commits 8,640 times a day. Delta's own default of 30
    days kept 259,000 entries and 2,592 checkpoints per table (docs/performance.md)."""
    if table.log_retention_hours is not None:
        return table.log_retention_hours
    if not table.vacuum_enabled:  # old versions keep their files: Delta's default
        return DEFAULT_LOG_RETENTION_HOURS
    return file_retention_hours(table)


# in a commit's info: who wrote it ("compaction", "stream"; the table's history shows it)
OPERATION = "otel_delta.operation"
# A commit of files our own code wrote (engines/data_files) carries no `operationMetrics`:
# delta-rs fills those only for the writes it runs. Its figures (num_added_rows,
# num_added_files, as delta-rs names them) go into the commit info under this prefix instead.
METRICS_PREFIX = "otel_delta.metrics."
READ_VERSION = "otel_delta.readVersion"
COMMIT_ID = "otel_delta.commitId"  # a random id: finds a commit of ours among others' in history
STATS_COLUMNS = "delta.dataSkippingStatsColumns"  # the columns the log records statistics of
# The Delta `txn` app id of every rewrite that changes no row (rewrite_transaction)
REWRITE_APP_ID = "otel-delta.rewrite"


def column_properties(layout: Layout, *, clustered: bool = False) -> dict[str, ColumnProperties]:
    """delta-rs per-column settings of a layout (top-level columns only), for files in any
    row order or `clustered` (sorted by the cluster key: delta-rs's Z-order on one column)."""
    plain = (*layout.plain_columns, *(() if clustered else layout.arrival_plain_columns))
    properties = {name: ColumnProperties(dictionary_enabled=False) for name in plain}
    for name, encoding in column_encodings(layout, clustered=clustered).items():
        properties[name] = ColumnProperties(dictionary_enabled=False, encoding=encoding)
    return properties


def rewrite_transaction() -> Transaction:
    """The Delta `txn` our own rewrites of files without a change to their rows commit with
    (today's compaction and a closed day's sort: maintenance/compaction.commit_swap), so that
    two of them that race conflict. delta-rs 1.6.6 does not fail a commit that removes files a
    concurrent commit removed with dataChange=false (delta-io/delta-rs#3982 let such removes
    pass its conflict checks): two rewrites of the same files (two replicas' maintenance) both
    landed, and each of their rows was in the table twice. Two commits carrying the same app id
    do conflict ("Concurrent transaction failed"): the later fails, and its next round plans
    again. delta-rs's own optimize and Z-order drop a commit's app transactions, so they cannot
    take part (README, "Several replicas"). The version only orders the rewrites (ms since the
    epoch); nothing reads it."""
    return Transaction(REWRITE_APP_ID, time.time_ns() // 1_000_000)


def table_uri(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def commit_info(operation: str | None, metrics: dict[str, int] | None = None) -> dict[str, str]:
    """A commit's own entries in its commit info: who wrote it (`OPERATION`) and, for a commit
    of files our own code wrote, what it did (`METRICS_PREFIX`), which `Table.history` reads
    (delta-rs records a WRITE with no metrics for such a commit)."""
    custom = {OPERATION: operation} if operation else {}
    custom.update({METRICS_PREFIX + k: str(v) for k, v in (metrics or {}).items()})
    return custom


def commit_metadata(
    operation: str | None = None,
    metrics: dict[str, int] | None = None,
    read_version: int | None = None,
    commit_id: str | None = None,
) -> dict[str, str]:
    """Everything of ours in a commit's commit info (`Lakehouse.commit_properties`): a
    commit delta-rs makes carries it as its custom metadata, one the bridge publishes itself
    (engines/local_commit) in the same keys."""
    custom = commit_info(operation, metrics)
    if read_version is not None:
        custom[READ_VERSION] = str(read_version)
    if commit_id is not None:
        custom[COMMIT_ID] = commit_id
    return custom


def holds_transaction(table: DeltaTable, app_transaction: Transaction) -> bool:
    """Does the table already hold this transaction (at its version or a later one)?"""
    version = table.transaction_version(app_transaction.app_id)
    return version is not None and version >= app_transaction.version


def bookkeeping_table(root: str, name: str, storage: dict[str, str] | None = None) -> str:
    """The URI of the bookkeeping table `name` under `root` (BOOKKEEPING_TABLES), created if
    absent (`_open_bookkeeping_table`)."""
    _open_bookkeeping_table(root, name, storage)
    return table_uri(root, name)


def _open_bookkeeping_table(
    root: str, name: str, storage: dict[str, str] | None = None
) -> DeltaTable:
    """The bookkeeping table `name`, at its latest version, created if absent: unpartitioned,
    with its description, whichever writer (the bridge, backfill, the stream, the connector)
    comes first; at the same moment, the other's is kept."""
    schema, description = BOOKKEEPING_TABLES[name]
    return DeltaTable.create(
        table_uri(root, name),
        schema,
        mode="ignore",
        name=name,
        description=description,
        storage_options=storage or None,
    )


def append_once(
    root: str,
    name: str,
    rows: pa.Table,
    transaction: Transaction,
    storage: dict[str, str] | None = None,
) -> bool:
    """Append `rows` to the bookkeeping table `name` in a commit carrying `transaction`,
    unless the table holds it already; True if written. One append from a table opened for
    it (`BookkeepingAppends` keeps the table open for many)."""
    return BookkeepingAppends(root, name, storage).append_once(rows, transaction)


class BookkeepingAppends:
    """Appends that happen once to one bookkeeping table, from a handle kept open between them.

    Opening (and, the first time, creating) the table read its whole log: two thirds of a
    dead letter's cost, paid again for every refused request while a table refuses every
    row. The handle follows its own commits; a transaction another process committed since
    it was opened is not seen by the check before the append, but delta-rs's conflict check
    refuses the append (the same app id in a commit it did not read), and the table is read
    again. After any error the handle is dropped and the next append opens the table again.
    Safe from several threads (one table's appends take turns)."""

    def __init__(self, root: str, name: str, storage: dict[str, str] | None = None) -> None:
        self.root = root
        self.name = name
        self.storage = storage
        self._table: DeltaTable | None = None
        self._lock = threading.Lock()

    def append_once(
        self,
        rows: pa.Table,
        transaction: Transaction,
        found: Callable[[DeltaTable], bool] | None = None,
    ) -> bool:
        """Append `rows` in a commit carrying `transaction`, unless the table holds it
        already (the append ran before a crash and is being run again, or another process
        made it meanwhile), or `found` finds the rows in it by another mark; True if written.

        Two processes appending the same transaction at once (the same backfill run twice at
        once) both find it absent; delta-rs commits one and refuses the other ("Concurrent
        transaction failed"), which is then not an error: the rows are in the table, once."""
        with self._lock:
            table, self._table = self._table or self._open(), None  # kept only if all goes well
            written = False
            if not holds_transaction(table, transaction) and not (found and found(table)):
                commit = CommitProperties(app_transactions=[transaction])
                try:
                    write_deltalake(table, rows, mode="append", commit_properties=commit)
                    written = True
                except CommitFailedError:
                    table = self._open()
                    if not holds_transaction(table, transaction):
                        raise
            if (local := local_path(table.table_uri)) is not None:
                # a dead letter lets the write-ahead log go of its record: on the disk first,
                # also when an earlier run wrote it (otel_delta/disk.py)
                sync_commit(local, table.version())
            self._table = table
            return written

    def _open(self) -> DeltaTable:
        return _open_bookkeeping_table(self.root, self.name, self.storage)


@dataclass(frozen=True)
class Lakehouse:
    """Where and how the telemetry tables are stored (from `[deltalake]` and `[spark]`)."""

    root: str
    partition_by: tuple[str, ...] = DEFAULT_PARTITION_BY
    storage_options: dict[str, str] = field(default_factory=dict)
    compression: str = "ZSTD"
    compression_level: int = INGEST_LEVEL
    target_file_size: int = 128 * 1024 * 1024
    checkpoint_interval: int = 100
    change_data_feed: bool = False
    log_retention_hours: float = DEFAULT_LOG_RETENTION_HOURS
    file_retention_hours: float = DEFAULT_FILE_RETENTION_HOURS
    max_commit_retries: int = 15
    # Who deletes expired log entries: delta-rs after every commit (its default), or the
    # maintainer's checkpoint step (`serve` with maintenance on). delta-rs's cleanup lists the
    # whole _delta_log each time, expired entries or not: on a local file system that was most
    # of a commit's growth with the log's length (6,000 entries: 50 ms against 13 ms without).
    expired_logs_on_commit: bool = True
    spark: SparkSettings = field(default_factory=SparkSettings)

    @classmethod
    def from_settings(cls, settings: Settings) -> Lakehouse:
        lake = settings.deltalake
        return cls(
            root=lake.resolved_table_path(),
            partition_by=tuple(lake.partition_by),
            storage_options=dict(lake.storage.options),
            compression=lake.table.compression,
            compression_level=lake.table.compression_level,
            target_file_size=lake.storage.file_size_target,
            checkpoint_interval=lake.table.checkpoint_interval,
            change_data_feed=lake.table.change_data_feed,
            log_retention_hours=log_retention_hours(lake.table),
            file_retention_hours=file_retention_hours(lake.table),
            max_commit_retries=lake.operations.max_commit_retries,
            spark=settings.spark,
        )

    # --- where -----------------------------------------------------------------------------

    def uri(self, name: str) -> str:
        """The URI of a table (telemetry or bookkeeping) under the root."""
        return table_uri(self.root, name)

    @property
    def storage(self) -> dict[str, str] | None:
        """Object-store options as delta-rs takes them (None when there are none)."""
        return dict(self.storage_options) or None

    @property
    def is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")

    def unusable(self, error: Exception) -> ConfigError:
        """The one line for a lakehouse whose store fails before anything is written (down,
        refusing the keys, no such bucket): the root, and the store's cause behind delta-rs's
        generic message ("Generic S3 error")."""
        return ConfigError(f"deltalake.table_path: cannot use {self.root}: {describe(error)}")

    def check_writable(self) -> None:
        """A bridge that could never commit refuses to start with one line instead of answering
        UNAVAILABLE forever: a local root is created if absent and written to once; on an
        object store the spans table is opened or created (a missing bucket, bad credentials
        or an unreachable endpoint show here, with their cause)."""
        if not self.is_local:
            try:
                self.create_table("spans")
            except OtelDeltaError:
                raise
            except Exception as exc:
                raise self.unusable(exc) from None
            return
        root = Path(self.root.removeprefix("file://"))
        probe = root / f".otel-delta-probe-{os.getpid()}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(f"deltalake.table_path: cannot write {root}: {exc}") from None

    # --- how files and commits are written --------------------------------------------------

    def writer_properties(self, table_name: str | None = None) -> WriterProperties:
        """How delta-rs encodes a table's Parquet (appends and rewrites alike): the configured
        codec, plus the table's column encodings (otel_delta/tables/layout.py) for a
        telemetry table."""
        spec = TABLES.get(table_name) if table_name else None
        return WriterProperties(
            compression=self.compression,  # type: ignore[arg-type]
            compression_level=self.compression_level,
            column_properties=column_properties(spec.layout) if spec else None,
        )

    def commit_properties(
        self,
        app_transaction: Transaction | None = None,
        operation: str | None = None,
        metrics: dict[str, int] | None = None,
        read_version: int | None = None,
        commit_id: str | None = None,
    ) -> CommitProperties:
        """delta-rs commit settings: the retry budget of a commit that lost a race, an optional
        Delta `txn` (app id + version) that makes a commit idempotent, and optionally in the
        commit info `otel_delta.operation` (history shows who wrote what), the `metrics` of a
        commit of files written by our own code (`METRICS_PREFIX`) and the version it was
        planned on (`otel_delta.readVersion`: lower than the commit's version minus one when
        it lost a race and was rebased, which delta-rs records only for its own writes), and
        the commit's `commit_id` (`COMMIT_ID`), by which its caller finds the commit's version
        in the log (engines/commit_log.own_commit)."""
        custom = commit_metadata(operation, metrics, read_version, commit_id)
        return CommitProperties(
            max_commit_retries=self.max_commit_retries,
            app_transactions=[app_transaction] if app_transaction else None,
            custom_metadata=custom or None,
        )

    def append_hooks(self) -> PostCommitHookProperties:
        """What delta-rs does after an append's commit: a checkpoint every
        `checkpoint_interval` versions, and the expired-log cleanup unless the maintainer
        does it (`expired_logs_on_commit`)."""
        return PostCommitHookProperties(
            create_checkpoint=True,
            cleanup_expired_logs=None if self.expired_logs_on_commit else False,
        )

    def table_properties(self, name: str | None = None) -> dict[str, str]:
        """Delta properties a new table gets (the telemetry table `name`: its layout's
        statistics columns too)."""
        properties = {SCHEMA_VERSION_PROPERTY: str(SCHEMA_VERSION)}
        spec = TABLES.get(name) if name else None
        if spec and spec.layout.stats_columns:
            properties[STATS_COLUMNS] = ",".join(spec.layout.stats_columns)
        if self.change_data_feed:
            properties[CHANGE_DATA_FEED] = "true"
        properties.update(self.configured_properties())
        return properties

    def configured_properties(self, current: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Delta properties that follow the settings on new and existing tables alike: the
        checkpoint interval (`checkpoint_interval`) and the retentions, as Delta intervals, of
        log entries (`log_retention_hours`) and removed files' tombstones (`retention_hours`).
        For a new table (`current` None) the interval, and the retentions that differ from
        Delta's defaults; for an existing one, whose properties are `current`, those it does
        not hold yet or holds with another value (a retention set before is undone by setting
        Delta's default back). The settings win over a value set on the table by other means
        (Spark's ALTER TABLE): delta-rs's and Spark's checkpoints follow the table's interval
        and the bridge's writer reopens its table at the setting's, and an interval written
        at creation only left a changed setting without effect on existing tables."""
        interval = str(self.checkpoint_interval)
        properties: dict[str, str] = {}
        if current is None or current.get(CHECKPOINT_INTERVAL) != interval:
            properties[CHECKPOINT_INTERVAL] = interval
        wanted = {
            LOG_RETENTION: (self.log_retention_hours, DEFAULT_LOG_RETENTION_HOURS),
            FILE_RETENTION: (self.file_retention_hours, DEFAULT_FILE_RETENTION_HOURS),
        }
        for key, (hours, default) in wanted.items():
            value = f"interval {round(hours * 3600)} seconds"
            held = None if current is None else current.get(key)
            if (held is None and hours != default) or (held is not None and held != value):
                properties[key] = value
        return properties

    # --- tables ----------------------------------------------------------------------------

    def open_table(self, name: str) -> DeltaTable:
        """A delta-rs handle on an existing table; TableNotFoundError if it is absent."""
        try:
            return DeltaTable(self.uri(name), storage_options=self.storage)
        except DeltaTableNotFound:
            raise TableNotFoundError(name, self.uri(name)) from None

    def exists(self, name: str) -> bool:
        return DeltaTable.is_deltatable(self.uri(name), storage_options=self.storage)

    def files(self, name: str, what: str) -> tuple[pafs.FileSystem, str]:
        """A filesystem and the path of table `name` in it, for what delta-rs has no call for
        (`what`, e.g. "removing a table", names it in the error): local paths and S3, with the
        same options as delta-rs; other stores are refused with the store named."""
        uri = self.uri(name)
        if self.is_local:
            return pafs.LocalFileSystem(), uri.removeprefix("file://")
        scheme, _, path = uri.partition("://")
        if scheme not in ("s3", "s3a"):
            raise OtelDeltaError(f"{what} is supported on local paths and S3, not {uri}")
        return s3_filesystem(self.storage_options), path

    def remove_table(self, name: str) -> None:
        """Delete every file of a table (log and data): on a local root and on S3; other
        object stores are refused with the scheme named, before anything is removed."""
        uri = self.uri(name)
        filesystem, path = self.files(name, "removing a table")
        if self.is_local:
            shutil.rmtree(path)
            return
        # Each pass deletes every object; a gateway that keeps "directory" objects refuses to
        # delete one whose children are listed in the same batch, so a pass per level of
        # directories (partition columns + the table's own) may be needed.
        for passes_left in range(len(self.partition_by) + 1, -1, -1):
            try:
                filesystem.delete_dir(path)
                return
            except FileNotFoundError:  # an earlier pass left nothing
                return
            except OSError as exc:
                if not passes_left:
                    raise CommitError(f"cannot remove {uri}: {describe(exc)}") from None

    def bookkeeping_table(self, name: str) -> str:
        """The URI of the bookkeeping table `name` (module function `bookkeeping_table`)."""
        return bookkeeping_table(self.root, name, self.storage)

    def create_table(self, name: str) -> DeltaTable:
        """The telemetry table `name`, created if absent, checked to be one we can write.

        Whichever engine or process writes first, the table gets the same schema, partitioning,
        description and properties; if another writer creates it at the same moment, theirs is
        opened (mode="ignore").
        """
        try:
            table = DeltaTable(self.uri(name), storage_options=self.storage)
        except DeltaTableNotFound:
            DeltaTable.create(
                self.uri(name),
                TABLES[name].schema,
                mode="ignore",
                partition_by=list(self.partition_by),
                name=name,
                description=TABLES[name].description,
                configuration=self.table_properties(name),
                storage_options=self.storage,
                raise_if_key_not_exists=False,  # our own schema-version property
            )
            table = DeltaTable(self.uri(name), storage_options=self.storage)
        self.check_compatible(name, table)
        if self.change_data_feed and table.metadata().configuration.get(CHANGE_DATA_FEED) != (
            "true"
        ):  # a table created before the feed was turned on gets it from now on
            table.alter.set_table_properties({CHANGE_DATA_FEED: "true"})
            table = DeltaTable(self.uri(name), storage_options=self.storage)
        changed = self.configured_properties(table.metadata().configuration)
        if changed:  # an existing table gets the configured interval and retentions
            table.alter.set_table_properties(changed)
            table = DeltaTable(self.uri(name), storage_options=self.storage)
        return table

    def check_compatible(self, name: str, table: DeltaTable) -> None:
        """CommitError if this otel-delta must not write the table (newer schema version, or
        partitioned differently from `deltalake.partition_by`)."""
        self.check_schema_version(name, table)
        partitions = tuple(table.metadata().partition_columns)
        if partitions != self.partition_by:
            raise CommitError(
                f"table {name} is partitioned by {list(partitions)} but deltalake.partition_by "
                f"is {list(self.partition_by)}"
            )

    @staticmethod
    def check_schema_version(name: str, table: DeltaTable) -> None:
        """CommitError if the table is of a newer schema version than this otel-delta's: its
        columns may mean what this version does not know, so rows of ours must not go in."""
        found = table.metadata().configuration.get(SCHEMA_VERSION_PROPERTY)
        if found is not None and int(found) > SCHEMA_VERSION:
            raise CommitError(
                f"table {name} has schema version {found}, newer than this bridge's "
                f"{SCHEMA_VERSION}: upgrade otel-delta"
            )

    # --- Spark -----------------------------------------------------------------------------

    def spark_conf(self, **overrides: Any) -> dict[str, str]:
        """The settings spark_session() starts Spark with (see session_conf)."""
        from otel_delta.spark.session import session_conf

        return session_conf(self.spark, derived=s3a_conf(self.storage_options), **overrides)

    def spark_session(self, **overrides: Any) -> SparkSession:
        """A SparkSession for these tables (`[spark]` settings; Delta jars from ./jars), with
        S3A set from the same storage options delta-rs uses: derived values only, which
        `[spark.conf]` overrides key by key (session_conf)."""
        from otel_delta.spark.session import spark_session

        return spark_session(self.spark, derived=s3a_conf(self.storage_options), **overrides)
