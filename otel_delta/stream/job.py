"""The streaming query: Kafka topics → `foreachBatch` → one Delta commit per table and batch.

Each micro-batch is one Spark job: the executors convert the messages and write the tables'
Parquet files (stream/convert.py), the driver collects the files' descriptions and commits
each table's files with delta-rs, as Add actions. Measured (bench/stream.py): Spark's own Delta
writer took ~3.3 s of a 4.5 s batch of 39k spans, most of it a fixed cost per batch, and moved
every row through the JVM.

Exactly once: Spark's checkpoint records which offsets each micro-batch covers, and every table
commit of batch N carries the Delta transaction (app id "otel-delta-stream-<query id>",
version N). The query id is Spark's, kept in the checkpoint (`<checkpoint>/metadata`): the
same across restarts from that checkpoint, new for a new one, so a batch that is re-run after
a crash skips the tables it already reached, and a fresh checkpoint is never taken for a
replay. The Spark session is the project's (Lakehouse.spark_session) with
Spark's Kafka source jars (jars/kafka) added to `spark.jars` for this job only.
"""

from __future__ import annotations

import difflib
import json
import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from otel_delta.admin import AdminThread
from otel_delta.config import AdminSettings, Settings, StreamSettings
from otel_delta.engines.data_files import (
    DataFile,
    added,
    commit_actions,
    not_appendable,
    stats_columns,
)
from otel_delta.engines.spark import spark_schema
from otel_delta.errors import CommitError, ConfigError, StreamFailedError, describe, first_line
from otel_delta.faults import crash_point
from otel_delta.lakehouse import STATS_COLUMNS, Lakehouse, holds_transaction, table_uri
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.stream.convert import MESSAGE_COLUMNS, STATS, WRITTEN, FileTarget, convert_task
from otel_delta.stream.progress import StreamStatus
from otel_delta.tables.schemas import DEAD_LETTER_TABLE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "_stream_checkpoints"
APP_ID_PREFIX = "otel-delta-stream-"
STREAM_OPERATION = "stream"  # `otel_delta.operation` of the stream's commits (table history)
QUERY_ID_TIMEOUT = 60.0
QUERY_LOGGER = "org.apache.spark.sql.execution.streaming.MicroBatchExecution"
UNKNOWN_TOPIC = "UnknownTopicOrPartitionException"


# the Java exceptions by which Spark knows a batch was interrupted by the query's stop
# (StreamExecution.IO_EXCEPTION_NAMES)
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


class BatchInterrupted(Exception):
    """A stop interrupted a micro-batch's Spark job. Spark then records no commit for the
    batch, so the next start re-runs it, and the tables it already reached skip it by their
    Delta transaction.

    Its message is short and in the form by which Spark recognizes a stop (StreamExecution's
    PROXY_ERROR), because that recognition runs a regular expression that recurses once per
    character of the message: py4j's own error, with its Java stack trace, overflowed the
    stream thread's stack and dumped a 1,100-line StackOverflowError on every stop mid-batch."""

    def __init__(self, interruption: str) -> None:
        super().__init__(
            f"py4j.protocol.Py4JJavaError: An error occurred while calling collectToPython.\n"
            f": {interruption}"
        )


class _NoInterruptedBatchTraceback(logging.Filter):
    """py4j logs every exception of a Python callback with its traceback; an interrupted
    batch is an orderly stop, logged by the job in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BatchInterrupted))


_QUIET_INTERRUPTIONS = _NoInterruptedBatchTraceback()


def checkpoint_location(settings: Settings) -> str:
    configured = settings.stream.checkpoint_location
    return configured or table_uri(settings.deltalake.resolved_table_path(), CHECKPOINT_DIR)


def check(stream: StreamSettings) -> dict[str, str]:
    """The topics to read (topic → signal); a ConfigError if there is nothing to read."""
    if not stream.bootstrap_servers.strip():
        raise ConfigError("stream.bootstrap_servers: required by `otel-delta stream`")
    topics = stream.topics()
    if not topics:
        raise ConfigError("stream: traces_topic, metrics_topic and logs_topic are all empty")
    return topics


def stream_session(lakehouse: Lakehouse) -> SparkSession:
    from otel_delta.spark.session import kafka_jars

    # added to Delta's jars and any `spark.jars` of [spark.conf] (session_conf merges them)
    spark = lakehouse.spark_session(jars=kafka_jars())
    if not log.isEnabledFor(logging.DEBUG):
        _quiet_query_errors(spark)
    return spark


def _quiet_query_errors(spark: SparkSession) -> None:
    """Spark logs a failed query at ERROR with the Java stack trace (45 lines for a topic that
    does not exist); the job's own last line already says why (StreamFailedError). Kept at
    `--log-level DEBUG`."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        QUERY_LOGGER, jvm.org.apache.logging.log4j.Level.OFF
    )


def failure_line(failure: object, topics: dict[str, str], stream: StreamSettings) -> str:
    """What the job says of a failed query: Spark's first line, and for a topic the brokers do
    not have (Spark's text names the exception, not the topic) which topics were read."""
    line = first_line(failure)
    if UNKNOWN_TOPIC in line:
        return (
            f"a topic it reads does not exist on {stream.bootstrap_servers} (one of "
            f'{", ".join(topics)}; create it, or set its stream.*_topic to ""): {line}'
        )
    return line


def check_kafka_options(spark: SparkSession, stream: StreamSettings) -> None:
    """A ConfigError for a `kafka_options` key the Kafka client does not know: Kafka only logs
    such a key (at a level Spark's log hides) and goes on without it, so a misspelt
    `security.protocol` or librdkafka's `sasl.mechanisms` connected without TLS or SASL,
    silently. The known names are the client's own (ConsumerConfig, from jars/kafka)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    known = set(jvm.org.apache.kafka.clients.consumer.ConsumerConfig.configNames())
    for key in stream.kafka_options:
        name = key.removeprefix("kafka.")
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(
                f"stream.kafka_options: {key} is not a setting of the Kafka consumer{hint}"
            )


def kafka_source(spark: SparkSession, stream: StreamSettings, topics: dict[str, str]) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stream.bootstrap_servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", stream.starting_offsets)
    )
    if stream.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(stream.max_offsets_per_trigger))
    for key, value in stream.kafka_options.items():
        reader = reader.option(f"kafka.{key.removeprefix('kafka.')}", value)
    return reader.load()


class BatchWriter:
    """The `foreachBatch` function: the executors convert and write the files (one Spark job),
    then the driver commits each table's files in one delta-rs commit with the batch's txn."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        topics: dict[str, str],
        status: StreamStatus,
        target: FileTarget,
        stopping: threading.Event | None = None,
    ) -> None:
        self.lakehouse = lakehouse
        self.topics = topics
        self.status = status
        self.stopping = stopping or threading.Event()  # set once the query is to stop
        self.target = target
        self.app_id: str | None = None
        self._ready = threading.Event()

    def bind(self, query_id: str) -> None:
        self.app_id = f"{APP_ID_PREFIX}{query_id}"
        self._ready.set()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        if not self._ready.wait(QUERY_ID_TIMEOUT):
            raise StreamFailedError("the streaming query's id never became known")
        assert self.app_id is not None
        started = time.monotonic()
        written = self._write_files(frame, batch_id)
        messages = rejected = 0
        reasons: list[str] = []
        files: dict[str, list[Any]] = {}
        for row in written:
            if row["table"] == STATS:
                messages += row["rows"]
                rejected += row["rejected"]
                if row["reason"]:
                    reasons.append(row["reason"])
            else:
                files.setdefault(row["table"], []).append(row)
        steps = [f"convert and write {time.monotonic() - started:.1f} s"]
        txn = Transaction(self.app_id, batch_id)
        committed: dict[str, list[Any]] = {}
        for name in sorted(files):
            table_started = time.monotonic()
            if self._commit(name, files[name], txn):
                committed[name] = files[name]
                crash_point("stream-table-committed")
                steps.append(f"commit {name} {time.monotonic() - table_started:.1f} s")
            else:
                steps.append(f"{name} already held the batch")
        seconds = time.monotonic() - started
        # rows of the tables this run committed: a batch re-run after a crash counted the
        # tables it skipped (already holding the batch) again, in its log line and /metrics
        counts = {name: sum(r["rows"] for r in rows) for name, rows in committed.items()}
        dead = counts.pop(DEAD_LETTER_TABLE, 0)
        self.status.batch_done(messages, counts, dead, rejected, seconds)
        log.info(
            "batch %d: %d message(s) → %s; %d dead letter(s), %d rejected item(s); "
            "%.1f s (%s), %.0f rows/s",
            batch_id,
            messages,
            ", ".join(f"{n} {r}" for n, r in sorted(counts.items())) or "nothing",
            dead,
            rejected,
            seconds,
            ", ".join(steps),
            sum(counts.values()) / seconds if seconds > 0 else 0.0,
        )
        if reasons:  # the receiver tells its client in partial_success; here, the log
            log.warning(
                "batch %d: %d item(s) refused inside messages that were stored; one: %s",
                batch_id,
                rejected,
                reasons[0],
            )

    def _write_files(self, frame: DataFrame, batch_id: int) -> list[Any]:
        """The Spark job of a batch: the executors convert its messages and write the files;
        the descriptions of the files come back. A stop interrupts it (BatchInterrupted)."""
        try:
            return (
                frame.select(*MESSAGE_COLUMNS)
                .mapInArrow(convert_task(self.topics, self.target), spark_schema(WRITTEN))
                .collect()
            )
        except Exception as exc:
            text = str(exc)
            interruption = next((name for name in INTERRUPTIONS if name in text), None)
            if interruption is None or not self.stopping.is_set():
                raise
            log.info("batch %d interrupted by the stop: the next start runs it again", batch_id)
            raise BatchInterrupted(interruption) from None

    def _commit(self, name: str, rows: list[Any], txn: Transaction) -> bool:
        """One commit adding the batch's files of table `name` (True); none if the table
        already holds the batch's transaction (the batch is being re-run after a crash)."""
        lakehouse = self.lakehouse
        if name == DEAD_LETTER_TABLE:
            uri = lakehouse.bookkeeping_table(name)
            delta = DeltaTable(uri, storage_options=lakehouse.storage)
        else:
            delta = lakehouse.create_table(name)
        if holds_transaction(delta, txn):
            return False
        reason = not_appendable(delta)
        if reason is not None:
            raise CommitError(f"the stream cannot append to {name}: {reason}")
        now_ms = int(time.time() * 1000)
        files = [
            DataFile(
                path=row["path"],
                size=row["size"],
                partition_values=json.loads(row["partition_values"]),
                stats=row["stats"],
                rows=row["rows"],
            )
            for row in rows
        ]
        try:
            commit_actions(
                delta,
                [f.add_action(now_ms) for f in files],
                lakehouse.commit_properties(txn, STREAM_OPERATION, added(files)),
            )
        except Exception as exc:
            raise CommitError(f"commit to {name} failed: {describe(exc)}") from exc
        return True


def file_target(lakehouse: Lakehouse, topics: dict[str, str]) -> FileTarget:
    """How the executors write: the lake's codec and partitioning, and per table the columns
    its log keeps statistics of (an existing table's own setting, else what creating it sets)
    and the schema of an existing table (which may be an older version's). Read before Spark
    starts: a store that cannot be read (down, refusing the keys) is one ConfigError line
    naming the lakehouse and the store's cause, at once."""
    names = {t for signal in topics.values() for t in SIGNALS_BY_NAME[signal].tables}
    stats: dict[str, frozenset[str] | None] = {}
    schemas: dict[str, pa.Schema] = {}
    for name in sorted(names):
        try:
            delta = DeltaTable(lakehouse.uri(name), storage_options=lakehouse.storage)
            configured = stats_columns(delta)
            schemas[name] = pa.schema(delta.schema().to_arrow())
        except TableNotFoundError:
            named = lakehouse.table_properties(name).get(STATS_COLUMNS)
            configured = {c.strip() for c in named.split(",")} if named else None
        except Exception as exc:  # the store's failure, whatever delta-rs raises for it
            raise lakehouse.unusable(exc) from None
        stats[name] = None if configured is None else frozenset(configured)
    return FileTarget(
        root=lakehouse.root,
        storage=lakehouse.storage,
        partition_by=tuple(lakehouse.partition_by),
        compression=lakehouse.compression,
        compression_level=lakehouse.compression_level,
        stats_columns=stats,
        schemas=schemas,
    )


def run_stream(settings: Settings, once: bool, stop: threading.Event | None = None) -> None:
    """Run the query until the topics are drained (`once`) or until `stop` / SIGTERM / SIGINT;
    a query failure raises StreamFailedError. The admin endpoint listens first, so a port in use is
    one line before Spark starts."""
    stream = settings.stream
    topics = check(stream)
    status = StreamStatus(topics, stall_seconds=stream.stall_seconds)
    admin = None
    if stream.admin_endpoint:
        admin = AdminThread(
            AdminSettings(endpoint=stream.admin_endpoint),
            status.checks,
            status.gauges,
            "stream.admin_endpoint",
        )
        log.info("/metrics, /healthz and /readyz on %s", admin.start())
    try:
        _run_query(settings, topics, status, once, stop or threading.Event())
    finally:
        if admin is not None:
            admin.stop()


def _run_query(
    settings: Settings,
    topics: dict[str, str],
    status: StreamStatus,
    once: bool,
    stop: threading.Event,
) -> None:
    stream = settings.stream
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per gateway call at INFO
    logging.getLogger("py4j.clientserver").addFilter(_QUIET_INTERRUPTIONS)
    lakehouse = Lakehouse.from_settings(settings)
    target = file_target(lakehouse, topics)
    # before Spark starts (tens of seconds): a SIGTERM meanwhile ended the process with 143
    # and no line, where the README promises exit 0
    handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            handlers[signum] = signal.signal(signum, lambda *_: stop.set())
    spark = None
    try:
        spark = stream_session(lakehouse)
        from pyspark.errors import IllegalArgumentException  # there once Spark started

        if stop.is_set():
            log.info("stopped while Spark was starting: no streaming query started")
            return
        check_kafka_options(spark, stream)
        writer = BatchWriter(lakehouse, topics, status, target, stop)
        location = checkpoint_location(settings)
        trigger: dict[str, Any] = (
            {"availableNow": True}
            if once
            else {"processingTime": f"{stream.trigger_interval_seconds} seconds"}
        )
        try:
            query = (
                kafka_source(spark, stream, topics)
                .writeStream.queryName("otel-delta-stream")
                .foreachBatch(writer)
                .option("checkpointLocation", location)
                .trigger(**trigger)
                .start()
            )
        except IllegalArgumentException as exc:
            # the Kafka source's check of its options (e.g. a `kafka_options` key Spark manages
            # itself, such as auto.offset.reset): its text starts with a newline, so the
            # generic one-line report was "IllegalArgumentException: " and nothing else
            reason = first_line(exc)
            raise ConfigError(f"stream: the Kafka source refuses its options: {reason}") from None
        writer.bind(str(query.id))
        status.query_started()
        log.info(
            "streaming %s from %s into %s (checkpoint %s, Delta txn app id %s)",
            ", ".join(f"{t} ({s})" for t, s in topics.items()),
            stream.bootstrap_servers,
            lakehouse.root,
            location,
            writer.app_id,
        )
        try:
            while query.isActive and not stop.is_set():
                query.awaitTermination(1)
                _observe(status, query)
        except Exception as exc:
            status.failure = failure_line(exc, topics, stream)
            raise StreamFailedError(status.failure) from exc
        _observe(status, query)  # the last batches of an availableNow run
        if query.isActive:
            log.info("stopping the streaming query")
            query.stop()
        failure = query.exception()
        if failure is not None:
            status.failure = failure_line(failure, topics, stream)
            raise StreamFailedError(status.failure)
    finally:
        status.active = False
        for signum, previous in handlers.items():
            signal.signal(signum, previous)
        if spark is not None:
            spark.stop()


def _observe(status: StreamStatus, query: Any) -> None:
    """Every progress report since the last look (Spark keeps the last 100), oldest first:
    a batch shorter than the polling second still gets its line."""
    for progress in query.recentProgress:
        status.observe(progress)
    status.log_stall()
