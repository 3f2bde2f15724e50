"""The delta-rs engine: in-process, no JVM; commits in milliseconds. It commits every live
append of the bridge (files written by engines/data_files where the table allows, by delta-rs
otherwise) and, by default, runs the connector's operations."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake import (
    DeltaTable,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError

from otel_delta.disk import made_durable
from otel_delta.engines import local_commit
from otel_delta.engines.base import rows_rejected, unwritable_features
from otel_delta.engines.checkpoint_thinning import checkpoint_gone
from otel_delta.engines.commit_log import log_entry, own_commit
from otel_delta.engines.data_files import (
    DataFile,
    added,
    commit_actions,
    local_filesystem,
    not_appendable,
    plain_parquet,
    stats_columns,
    table_filesystem,
    write_partitioned,
)
from otel_delta.engines.vacuum import vacuum_files
from otel_delta.errors import CommitError, RowsRejectedError, describe
from otel_delta.lakehouse import (
    CHECKPOINT_INTERVAL,
    COMMIT_ID,
    Lakehouse,
    commit_metadata,
)
from otel_delta.metrics import COMMIT_RACES
from otel_delta.priority import background_threads
from otel_delta.retry import retrying
from otel_delta.tables import TABLES
from otel_delta.tables.packed import plain_schema, unpack
from otel_delta.tables.versions import conform

log = logging.getLogger(__name__)

DELTALAKE_VERSION = version("deltalake")
TRANSIENT_RETRIES = 3  # attempts after the first, for I/O errors and races delta-rs gave up on


def _writes_own_files(table: DeltaTable, schema: pa.Schema, data: pa.Table) -> bool:
    """May this append write its files itself? Only when the files are the table's rows as
    plain Parquet in the table's own types (`schema`), and nothing (a CHECK constraint) needs
    delta-rs's writer to check rows; otherwise delta-rs writes them."""
    if not_appendable(table) is not None or not plain_parquet(table):
        return False
    types = plain_schema(data.schema)  # packed columns are written as the strings they hold
    return [(f.name, f.type) for f in schema] == [(f.name, f.type) for f in types]


def committed_version(
    filesystem: pa_fs.FileSystem, read_version: int, commit_id: str, attempts: int
) -> int:
    """The version of our append tagged `commit_id` (`Lakehouse.commit_properties`), made on
    `read_version`: the next version, or a later one when other writers committed first
    (engines/commit_log.own_commit). Raises CommitError when the entries cannot be read: the
    commit is in the table, and appending again would store its rows twice."""
    version = own_commit(filesystem, read_version, COMMIT_ID, commit_id, attempts=attempts)
    if version is None:
        raise CommitError(f"commit {commit_id} is not in the log after version {read_version}")
    return version


class DeltaRsEngine:
    """One cached delta-rs handle per table for appends (the log is then read incrementally);
    every other operation opens the table afresh."""

    name: Literal["delta-rs"] = "delta-rs"
    dialect: Literal["datafusion"] = "datafusion"
    commit_id_key: str = COMMIT_ID  # custom commit metadata takes a key of our own

    def __init__(self, lakehouse: Lakehouse, transient_retries: int = TRANSIENT_RETRIES) -> None:
        self.lakehouse = lakehouse
        self.transient_retries = transient_retries
        self._tables: dict[str, DeltaTable] = {}
        self._appends: dict[str, int] = {}  # appends through each cached handle
        # the latest version of each cached table known here: the handle's, or a later one of
        # a commit of ours published without delta-rs (engines/local_commit)
        self._versions: dict[str, int] = {}
        # per table, per Delta app id: the highest transaction version the table is known to
        # hold (read once, then followed by this engine's own commits; forgotten with the
        # handle, after any failure). delta-rs's `transaction_version` reads every log entry
        # since the checkpoint, each a GET on an object store: asked before every append, it
        # took up to 115 requests an append on S3 at the default checkpoint interval
        self._held: dict[str, dict[str, int]] = {}
        self._no_links: set[str] = set()  # tables on a file system without hard links
        self._local: dict[str, pa_fs.SubTreeFileSystem | None] = {}  # local_filesystem of each
        self._locks = {name: threading.Lock() for name in TABLES}
        self._writer_properties = {name: lakehouse.writer_properties(name) for name in TABLES}
        self._default_properties = lakehouse.writer_properties()
        self._encoders: ThreadPoolExecutor | None = None  # created by the first `spread`
        self._wide = False
        self._background: ThreadPoolExecutor | None = None  # created by `yield_while`
        self._yielding: Callable[[], bool] = lambda: False

    def yield_while(self, condition: Callable[[], bool]) -> None:
        """See TableWriter.yield_while: niced threads encode those files, a thread per table
        (tables commit at the same time, each one file after another)."""
        if self._background is None:
            self._background = background_threads("encode-bg", len(TABLES))
        self._yielding = condition

    def _placement(self) -> ThreadPoolExecutor | None:
        """Where the next file of a commit on its own thread is encoded (None: that thread)."""
        return self._background if self._yielding() else None

    def spread(self, wide: bool) -> None:
        """Wide: encode each append's partition files on every core at once (see
        TableWriter.spread); otherwise one after another on the committing thread."""
        if wide and self._encoders is None:
            self._encoders = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="encode")
        self._wide = wide

    def _properties(self, table_name: str) -> WriterProperties:
        return self._writer_properties.get(table_name, self._default_properties)

    def uri(self, name: str) -> str:
        return self.lakehouse.uri(name)

    def forget(self, name: str) -> None:
        """Drop the cached handle (e.g. after a schema change), so the next commit reloads."""
        with self._locks[name]:
            self._drop(name)

    def _drop(self, name: str) -> None:
        self._tables.pop(name, None)
        self._versions.pop(name, None)
        self._held.pop(name, None)

    def open(self, name: str) -> DeltaTable:
        """The cached handle, creating the table if absent (see Lakehouse.create_table).

        A cached handle first reads the commits made since (by this process's other operations,
        maintenance, or other writers): delta-rs treats an append as a reader of the snapshot
        it was planned on, so an append on a stale snapshot after a merge, delete or compaction
        would fail its commit once and be retried. Reading the log's tail is one listing, and
        on a local file system a listing walks the whole `_delta_log` (about 1 µs per entry),
        so there the handle first looks for the next commit's file and reads the tail only
        when someone else has committed (`_moved_on`).

        After `checkpoint_interval` appends the handle is opened afresh, from the latest
        checkpoint: a handle only ever updated incrementally got slower with each commit
        (measured over 1,600 appends of 200 spans with compaction every 100: p50 25.5 → 45.1 ms
        from the first to the last 10%, against 26.9 → 37.7 ms reopened every 100 appends)."""
        table = self._tables.get(name)
        if table is not None and self._appends.get(name, 0) >= self.lakehouse.checkpoint_interval:
            self._versions.pop(name, None)
            table = self._tables[name] = self.lakehouse.open_table(name)
            self._appends[name] = 0
        elif table is None:
            table = self._tables[name] = self.lakehouse.create_table(name)
            self._appends[name] = 0
        elif self._moved_on(name, table):
            self._catch_up(name, table)
        return table

    def _holds(
        self, name: str, table: DeltaTable, app_transaction: Transaction, fresh: bool = False
    ) -> tuple[bool, DeltaTable]:
        """Does the table hold the transaction already, and the handle to go on with: read from
        the log the first time an app id is asked for since the handle was opened (or with
        `fresh`), then known from this engine's own commits (`_held`). delta-rs
        reads transactions from the checkpoint its snapshot was built on; the log cleanup thins
        old checkpoints (engines/checkpoint_thinning.py), and a handle that only followed its
        own commits can still be built on one of those: it is then opened afresh, from the
        newest, rather than spending an attempt of the append on the error."""
        known = self._held.get(name, {}).get(app_transaction.app_id)
        if known is not None and not fresh:
            return known >= app_transaction.version, table
        try:
            held = table.transaction_version(app_transaction.app_id)
        except Exception as exc:
            if not checkpoint_gone(exc):
                raise
            self._drop(name)
            table = self.open(name)
            held = table.transaction_version(app_transaction.app_id)
        self._held.setdefault(name, {})[app_transaction.app_id] = -1 if held is None else held
        return held is not None and held >= app_transaction.version, table

    def _latest(self, name: str, table: DeltaTable) -> int:
        return max(self._versions.get(name, -1), table.version())

    def _catch_up(self, name: str, table: DeltaTable) -> None:
        """Read the log's tail into the handle."""
        table.update_incremental()
        self._versions[name] = table.version()

    def _local_filesystem(self, name: str) -> pa_fs.SubTreeFileSystem | None:
        """The table's directory when it is on a local file system (looked up once)."""
        if name not in self._local:
            self._local[name] = local_filesystem(self.uri(name))
        return self._local[name]

    def _moved_on(self, name: str, table: DeltaTable) -> bool:
        """Has someone else committed since the latest version known here? On a local file
        system: is the next version's log entry there (one stat); elsewhere assumed, and the
        tail is read (object stores list from an offset)."""
        local = self._local_filesystem(name)
        if local is None:
            return True
        entry = log_entry(self._latest(name, table) + 1)
        return local.get_file_info(entry).type != pa_fs.FileType.NotFound

    # --- appends ---------------------------------------------------------------------------

    def append(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None = None
    ) -> int:
        with self._locks[table_name]:
            version = retrying(
                lambda: self._append_once(table_name, data, app_transaction),
                attempts=self.transient_retries + 1,
                retry_on=(CommitFailedError, DeltaError, OSError),
                what=f"commit to {table_name}",
                give_up=lambda exc, n: CommitError(
                    f"commit to {table_name} failed after {n} attempts: {describe(exc)}"
                ),
            )
            local = self._local_filesystem(table_name)
            if local is not None:
                try:
                    made_durable(table_name, Path(local.base_path), version)
                except CommitError:
                    # the commit stands: a retry with its transaction must find it, which a
                    # handle left at the version before it would not (and commit it again)
                    self._drop(table_name)
                    raise
            return version

    def _append_once(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None
    ) -> int:
        try:
            table = self.open(table_name)
            if app_transaction is not None:
                held, table = self._holds(table_name, table, app_transaction)
                if held:
                    return self._latest(table_name, table)  # an earlier attempt landed
            version = self._write(table_name, table, data, app_transaction)
            self._appends[table_name] = self._appends.get(table_name, 0) + 1
            if app_transaction is not None and table_name in self._held:
                held = self._held[table_name]
                held[app_transaction.app_id] = max(
                    held.get(app_transaction.app_id, -1), app_transaction.version
                )
            return table.version() if version is None else version
        except Exception as exc:
            self._drop(table_name)  # reload the log before the next attempt
            if rows_rejected(exc):  # not retried: these rows can never commit
                first = describe(exc).split(" Preview of invalid data")[0]
                raise RowsRejectedError(f"{table_name} refused the rows: {first}") from exc
            if unwritable_features(exc):  # not retried: no attempt can commit until it is gone
                raise CommitError(
                    f"table {table_name} asks its writers for a table feature delta-rs "
                    f"{DELTALAKE_VERSION} cannot write ({describe(exc)}; turned on by another "
                    "writer, e.g. Spark's ALTER TABLE ... SET TBLPROPERTIES): nothing is "
                    "committed to it until the feature is dropped (Spark: ALTER TABLE ... "
                    "DROP FEATURE <name>)"
                ) from exc
            raise

    def _write(
        self,
        table_name: str,
        table: DeltaTable,
        data: pa.Table,
        app_transaction: Transaction | None,
    ) -> int | None:
        """Append; the version of the commit when it is known apart from the handle's."""
        schema = pa.schema(table.schema().to_arrow())
        data = conform(table_name, schema, data)  # an evolved or older-version table's columns
        if _writes_own_files(table, schema, data):
            return self._write_files(table_name, table, data, app_transaction)
        write_deltalake(
            table,
            unpack(data),
            mode="append",
            target_file_size=self.lakehouse.target_file_size,
            writer_properties=self._properties(table_name),
            commit_properties=self.lakehouse.commit_properties(app_transaction),
            post_commithook_properties=self.lakehouse.append_hooks(),
        )
        return None  # delta-rs leaves the handle at the version of this commit

    def _write_files(
        self,
        table_name: str,
        table: DeltaTable,
        data: pa.Table,
        app_transaction: Transaction | None,
    ) -> int:
        """Write the rows' files with pyarrow (engines/data_files), then commit them as Add
        actions; returns the commit's version.

        Same files, cheaper: under the Collector load (bench/collector_load.py,
        traces, two alternating runs) server CPU went from 13.9/13.6 to 11.3/9.4 µs per span
        and peak RSS from about 1 GB to 650-740 MiB against delta-rs's writer, which split
        the rows by partition with copies and kept its encoding memory in its allocator."""
        lake = self.lakehouse
        partition_by = list(table.metadata().partition_columns)
        filesystem = table_filesystem(table.table_uri, lake.storage)
        files = write_partitioned(
            data,
            data.schema,
            partition_by,
            filesystem,
            TABLES[table_name].layout,
            lake.compression,
            lake.compression_level,
            stats_columns(table),
            self._encoders if self._wide else None,
            self._placement,
        )
        now_ms = int(time.time() * 1000)
        read_version = self._latest(table_name, table)  # what the append was planned on
        own = self._publish(
            table_name, table, files, partition_by, app_transaction, now_ms, read_version
        )
        if own is not None:
            return own
        commit_id = uuid.uuid4().hex
        commit_actions(
            table,
            [f.add_action(now_ms) for f in files],
            lake.commit_properties(
                app_transaction,
                metrics=added(files),
                read_version=read_version,
                commit_id=commit_id,
            ),
            self.lakehouse.append_hooks(),
        )
        # committed: from here on nothing may raise an error that would append the rows again
        version = committed_version(
            filesystem, read_version, commit_id, attempts=self.transient_retries + 1
        )
        if version > read_version + 1:  # another writer took the planned version: /metrics
            COMMIT_RACES.labels(table_name).inc()
        try:
            self._catch_up(table_name, table)  # the handle does not follow a transaction's commit
        except Exception as exc:
            log.warning("reloading %s after its commit: %s", table_name, describe(exc))
            self._drop(table_name)
        return version

    def _publish(
        self,
        table_name: str,
        table: DeltaTable,
        files: list[DataFile],
        partition_by: list[str],
        app_transaction: Transaction | None,
        now_ms: int,
        read_version: int,
    ) -> int | None:
        """Commit the files ourselves where the table allows (engines/local_commit), at the
        version after `read_version`, the latest known here; that version, or None when
        delta-rs must commit them: not a local table, a protocol that asks more of a writer,
        or another writer had that version already (the handle then reads what it
        committed). When that writer committed this very transaction (the same backfill run
        twice at once), its version: its commit holds these rows, and delta-rs, planning from
        a handle that has read it, would see no conflict and store them again (our files stay
        unreferenced, for vacuum). On an object store the handle has not read the winner, and
        delta-rs's conflict check refuses the transaction itself."""
        local = self._local_filesystem(table_name)
        if local is None or table_name in self._no_links:
            return None
        if not local_commit.blind_appendable(table):
            return None
        log_dir = Path(local.base_path) / "_delta_log"
        version = read_version + 1
        metadata = commit_metadata(
            metrics=added(files), read_version=read_version, commit_id=uuid.uuid4().hex
        )
        body = local_commit.entry(files, partition_by, metadata, app_transaction, now_ms)
        try:
            published = local_commit.publish(log_dir, version, body)
        except OSError as exc:
            if exc.errno not in local_commit.NO_LINKS:
                raise
            log.warning("%s: no hard links in %s (%s): delta-rs commits", table_name, log_dir, exc)
            self._no_links.add(table_name)
            return None
        if not published:
            self._catch_up(table_name, table)
            if app_transaction is not None:  # the winner may have committed this very one
                held, current = self._holds(table_name, table, app_transaction, fresh=True)
                if held:
                    return current.version()
            return None
        # committed: from here on nothing may raise an error that would append the rows again
        self._versions[table_name] = version
        self._checkpoint_after(table_name, table, version)
        return version

    def _checkpoint_after(self, table_name: str, table: DeltaTable, version: int) -> None:
        """What delta-rs's post-commit hook does after an append (`Lakehouse.append_hooks`): a
        checkpoint after every `delta.checkpointInterval`-th commit, and then the expired log's
        clean-up unless the maintainer does it. A failure leaves the next checkpoint to the
        next interval or the maintainer: the commit stands."""
        configured = table.metadata().configuration.get(CHECKPOINT_INTERVAL)
        interval = int(configured) if configured else self.lakehouse.checkpoint_interval
        if (version + 1) % interval:  # as delta-rs counts: after every interval-th commit
            return
        try:
            self._catch_up(table_name, table)
            table.create_checkpoint()
            if self.lakehouse.expired_logs_on_commit:
                table.cleanup_metadata()
        except Exception as exc:
            log.warning("checkpoint of %s at version %d: %s", table_name, version, describe(exc))
            self._drop(table_name)  # the next append reopens the table

    # --- operations ------------------------------------------------------------------------

    def conflicts(self) -> tuple[type[BaseException], ...]:
        return (CommitFailedError,)

    def _fresh(self, table_name: str) -> DeltaTable:
        return self.lakehouse.open_table(table_name)

    def merge(
        self, table_name: str, source: pa.Table, condition: str, commit_id: str
    ) -> tuple[int, int]:
        metrics = (
            self._fresh(table_name)
            .merge(
                source,
                condition,
                source_alias="s",
                target_alias="t",
                writer_properties=self._properties(table_name),
                commit_properties=self.lakehouse.commit_properties(commit_id=commit_id),
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return metrics["num_target_rows_inserted"], metrics["num_target_rows_updated"]

    def delete(self, table_name: str, condition: str, commit_id: str) -> int:
        metrics = self._fresh(table_name).delete(
            condition,
            writer_properties=self._properties(table_name),
            commit_properties=self.lakehouse.commit_properties(commit_id=commit_id),
        )
        return int(metrics.get("num_deleted_rows", 0))

    def optimize(
        self,
        table_name: str,
        where: str | None,
        partition_filters: list[tuple[str, str, Any]] | None,
        z_order: list[str],
        target_size: int,
        commit_id: str,
    ) -> dict[str, Any]:
        optimizer = self._fresh(table_name).optimize
        common: dict[str, Any] = {
            "partition_filters": partition_filters,
            "target_size": target_size,
            "writer_properties": self._properties(table_name),
            "commit_properties": self.lakehouse.commit_properties(commit_id=commit_id),
        }
        if z_order:
            return optimizer.z_order(z_order, **common)
        return optimizer.compact(**common)

    def vacuum(self, table_name: str, retention_hours: int, dry_run: bool) -> list[str]:
        """Only files that are there: delta-rs alone also lists (and counts as deleted) the
        files of tombstones an earlier vacuum already deleted (engines/vacuum.py)."""
        table = self._fresh(table_name)
        return vacuum_files(self.lakehouse, table_name, table, retention_hours, dry_run)

    def restore(self, table_name: str, target: int | datetime, commit_id: str) -> tuple[int, int]:
        metrics = self._fresh(table_name).restore(
            target, commit_properties=self.lakehouse.commit_properties(commit_id=commit_id)
        )
        return int(metrics.get("numRestoredFile", 0)), int(metrics.get("numRemovedFile", 0))
