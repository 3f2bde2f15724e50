"""The Spark engine (delta-spark): for bulk writes and for tables beyond one machine.

Tables are created by the same code as delta-rs's (Lakehouse.create_table), so schema,
partitioning, description and properties are identical whichever engine wrote first; the
session keeps deletion vectors and row tracking off, so delta-rs can go on writing them. The
session is started on first use, never before: a bridge that never needs Spark starts no JVM.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from deltalake import Transaction

from otel_delta.disk import local_path, made_durable
from otel_delta.engines.base import rows_rejected
from otel_delta.engines.commit_log import own_commit
from otel_delta.engines.data_files import table_filesystem
from otel_delta.engines.vacuum import vacuum_files
from otel_delta.errors import CommitError, RowsRejectedError, first_line
from otel_delta.lakehouse import Lakehouse
from otel_delta.spark.session import forget, stopped
from otel_delta.sql import quote_identifier
from otel_delta.tables.packed import unpack
from otel_delta.tables.versions import retired

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
ANSI_MODE = "spark.sql.ansi.enabled"
# the userMetadata of every commit the session makes that sets none itself (a DataFrame write
# sets its own with the option of that name): how a MERGE, DELETE, OPTIMIZE or RESTORE is tagged
COMMIT_TAG = "spark.databricks.delta.commitInfo.userMetadata"
USER_METADATA = "userMetadata"  # Delta's one free-form field of a commitInfo
log = logging.getLogger(__name__)


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an Arrow schema (maps, lists, structs, UTC timestamps, dates)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def with_table_columns(table_name: str, columns: list[str], frame: DataFrame) -> DataFrame:
    """`frame` (rows of the current schema) with the retired columns the table still has,
    computed by their SQL (tables/versions.py), in the table's column order; Delta fills a
    column added by schema evolution with NULL by itself."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    derived = retired(table_name)
    missing = [name for name in columns if name in derived and name not in frame.columns]
    if not missing:
        return frame
    # Analysed with ANSI mode off, the sum wraps in 64 bits as the stored bit patterns do (an
    # end time past 2^63 ns) instead of failing the commit; the plan keeps that mode after.
    session = frame.sparkSession
    ansi = session.conf.get(ANSI_MODE)
    session.conf.set(ANSI_MODE, "false")
    try:
        for name in missing:
            column = derived[name]
            frame = frame.withColumn(name, F.expr(column.sql).cast(from_arrow_type(column.type)))
    finally:
        session.conf.set(ANSI_MODE, ansi)
    order = [name for name in columns if name in frame.columns]
    return frame.select(*order, *[name for name in frame.columns if name not in order])


def size_for_local(spark: SparkSession) -> None:
    """Delta rebuilds each snapshot with 50 partitions by default: right for a cluster, but on
    a local session it makes every operation several times slower."""
    partitions = max(2, spark.sparkContext.defaultParallelism * 2)
    spark.conf.set(SNAPSHOT_PARTITIONS, str(partitions))


class SparkEngine:
    """The engine over a SparkSession: one given, or started from the lakehouse's `[spark]`
    settings on first use."""

    name: Literal["spark"] = "spark"
    dialect: Literal["spark"] = "spark"
    commit_id_key: str = USER_METADATA

    def __init__(
        self,
        lakehouse: Lakehouse,
        session: SparkSession | Callable[[], SparkSession] | None = None,
    ) -> None:
        self.lakehouse = lakehouse
        if session is None or callable(session):
            self._factory: Callable[[], SparkSession] = session or lakehouse.spark_session
            self._session: SparkSession | None = None
            self._owned = session is None  # started here: started again here if it stops
        else:
            self._factory = lambda: session  # type: ignore[assignment,return-value]
            self._session = session  # type: ignore[assignment]
            self._owned = False
        self._start_lock = threading.Lock()
        self._settings_lock = threading.Lock()  # see `_operation`

    @property
    def session(self) -> SparkSession:
        with self._start_lock:
            if self._session is not None and self._owned and stopped(self._session):
                # its JVM died or its context stopped: every commit would fail until a
                # restart (the WAL keeps their rows meanwhile); a new one is started
                log.warning("Spark stopped under the bridge (its JVM ended?); starting it again")
                forget(self._session)
                self._session = None
            if self._session is None:
                self._session = self._factory()
                if self._session.sparkContext.master.startswith("local"):
                    size_for_local(self._session)
            # Parquet as the bridge writes it (deltalake.table.compression), also for rewrites
            codec = {"UNCOMPRESSED": "none"}.get(
                self.lakehouse.compression, self.lakehouse.compression.lower()
            )
            self._session.conf.set("spark.sql.parquet.compression.codec", codec)
            return self._session

    @property
    def started(self) -> bool:
        return self._session is not None

    def uri(self, name: str) -> str:
        return self.lakehouse.uri(name)

    def _delta_table(self, table_name: str) -> Any:
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.session, self.uri(table_name))

    def _path_sql(self, table_name: str) -> str:
        return f"delta.{quote_identifier(self.uri(table_name), 'spark')}"

    @contextmanager
    def _operation(self, commit_id: str | None) -> Iterator[SparkSession]:
        """The session for one operation, every commit it makes tagged with `commit_id` in its
        userMetadata (Engine: how the caller finds its version). delta-spark's Python API
        returns no version, and Delta takes the userMetadata of a MERGE, DELETE, OPTIMIZE or
        RESTORE only from a session setting (`COMMIT_TAG`), which every thread on the session
        shares: operations therefore run one at a time (so do the other settings they change,
        optimize's file size and vacuum's retention check), and every append sets its own
        userMetadata (`save`), which wins over the setting, so no append is ever tagged as an
        operation's. A userMetadata the session had is set back afterwards."""
        with self._settings_lock:
            spark = self.session
            if commit_id is None:
                yield spark
                return
            previous = spark.conf.get(COMMIT_TAG, None)
            spark.conf.set(COMMIT_TAG, commit_id)
            try:
                yield spark
            finally:
                if previous is None:
                    spark.conf.unset(COMMIT_TAG)
                else:
                    spark.conf.set(COMMIT_TAG, previous)

    # --- appends ---------------------------------------------------------------------------

    def append(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None = None
    ) -> int:
        frame = self.session.createDataFrame(unpack(data))  # the bridge's buffered form
        return self.append_frame(table_name, frame, app_transaction)

    def spread(self, wide: bool) -> None:
        """Nothing to change: Spark's writes always run on every core of its cluster."""

    def yield_while(self, condition: Callable[[], bool]) -> None:
        """Nothing to change: Spark's writes run in its executors' processes."""

    def append_frame(
        self,
        table_name: str,
        frame: DataFrame,
        app_transaction: Transaction | None = None,
    ) -> int:
        """One Delta commit of `frame` to a telemetry table (created first if absent)."""
        table = self.lakehouse.create_table(table_name)
        columns = [field.name for field in table.schema().fields]
        frame = with_table_columns(table_name, columns, frame)
        return self.save(table_name, self.uri(table_name), frame, app_transaction)

    def save(
        self,
        label: str,
        uri: str,
        frame: DataFrame,
        app_transaction: Transaction | None = None,
    ) -> int:
        """Append `frame` to the existing Delta table at `uri`; returns the version of its
        commit, read from the log by the commit id in its userMetadata
        (engines/commit_log.own_commit): the table's latest version after the write may
        already be another writer's (the bridge's appends land all the time).
        With `app_transaction`, Delta skips the commit if that txn is already recorded: then
        the version the table was at before."""
        from deltalake import DeltaTable  # a log read through delta-rs: no Spark job

        before = DeltaTable(uri, storage_options=self.lakehouse.storage).version()
        commit_id = uuid.uuid4().hex
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("compression", self.lakehouse.compression.lower())
            .option("parquet.compression.codec.zstd.level", str(self.lakehouse.compression_level))
        )
        if app_transaction is not None:
            writer = writer.option("txnAppId", app_transaction.app_id)
            writer = writer.option("txnVersion", str(app_transaction.version))
        writer = writer.option(USER_METADATA, commit_id)  # wins over an operation's COMMIT_TAG
        try:
            writer.save(uri)
        except Exception as exc:  # py4j / AnalysisException: surface as our error, one line
            first = first_line(exc)
            if rows_rejected(exc):
                raise RowsRejectedError(f"{label} refused the rows: {first}") from exc
            raise CommitError(f"Spark commit to {label} failed: {first}") from exc
        files = table_filesystem(uri, self.lakehouse.storage, create=False)
        version = own_commit(files, before, USER_METADATA, commit_id)
        if version is None:
            return before
        root = local_path(uri)
        if root is not None:  # Hadoop's local file system fsyncs nothing either
            made_durable(label, root, version)
        return version

    # --- operations ------------------------------------------------------------------------

    def conflicts(self) -> tuple[type[BaseException], ...]:
        # delta-spark turns Delta's Java conflicts into these Python exceptions only once
        # delta.exceptions.captured is loaded (nothing of delta-spark loads it): without it a
        # conflict is a Py4JJavaError, never retried nor a ConcurrentModificationError.
        import delta.exceptions.captured  # noqa: F401
        from delta import exceptions as conflicts

        return (
            conflicts.DeltaConcurrentModificationException,
            conflicts.ConcurrentWriteException,
            conflicts.MetadataChangedException,
            conflicts.ProtocolChangedException,
            conflicts.ConcurrentAppendException,
            conflicts.ConcurrentDeleteReadException,
            conflicts.ConcurrentDeleteDeleteException,
            conflicts.ConcurrentTransactionException,
        )

    def merge(
        self, table_name: str, source: pa.Table, condition: str, commit_id: str
    ) -> tuple[int, int]:
        with self._operation(commit_id) as spark:
            frame = spark.createDataFrame(source)
            metrics = (
                self._delta_table(table_name)
                .alias("t")
                .merge(frame.alias("s"), condition)
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
                .collect()[0]
            )
        return int(metrics["num_inserted_rows"]), int(metrics["num_updated_rows"])

    def delete(self, table_name: str, condition: str, commit_id: str) -> int:
        with self._operation(commit_id) as spark:
            rows = spark.sql(f"DELETE FROM {self._path_sql(table_name)} WHERE {condition}")
            row = rows.collect()
        return int(row[0]["num_affected_rows"]) if row else 0

    def optimize(
        self,
        table_name: str,
        where: str | None,
        partition_filters: list[tuple[str, str, Any]] | None,
        z_order: list[str],
        target_size: int,
        commit_id: str,
    ) -> dict[str, Any]:
        """OPTIMIZE [WHERE partition predicate] [ZORDER BY]; Delta's metrics as a dict. Each
        of its commits is tagged (Delta may commit a large OPTIMIZE in batches)."""
        with self._operation(commit_id) as spark:
            spark.conf.set(OPTIMIZE_MAX_FILE_SIZE, str(target_size))
            builder = self._delta_table(table_name).optimize()
            if where:
                builder = builder.where(where)
            frame = builder.executeZOrderBy(*z_order) if z_order else builder.executeCompaction()
            return frame.collect()[0]["metrics"].asDict(recursive=True)

    def vacuum(self, table_name: str, retention_hours: int, dry_run: bool) -> list[str]:
        """Through delta-rs, as the delta-rs engine vacuums (engines/vacuum.py: one vacuum
        for both engines, deleting and counting the same files). Spark's own VACUUM differs
        twice: its default (FULL) deletes files no commit references once they are as old as
        the retention, so RETAIN 0 HOURS beside a serving bridge deleted the files of a commit
        about to land; and its LITE refuses a table whose early log entries were cleaned up
        (DELTA_CANNOT_VACUUM_LITE), as scheduled maintenance does."""
        table = self.lakehouse.open_table(table_name)
        return vacuum_files(self.lakehouse, table_name, table, retention_hours, dry_run)

    def restore(self, table_name: str, target: int | datetime, commit_id: str) -> tuple[int, int]:
        with self._operation(commit_id):
            table = self._delta_table(table_name)
            if isinstance(target, datetime):
                frame = table.restoreToTimestamp(target.isoformat())
            else:
                frame = table.restoreToVersion(target)
            metrics = frame.collect()[0].asDict()
        return int(metrics.get("num_restored_files", 0)), int(metrics.get("num_removed_files", 0))
