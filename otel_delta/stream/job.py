"""The streaming query: Kafka topics → `foreachBatch` → one Delta commit per table and batch.

Exactly once: Spark's checkpoint records which offsets each micro-batch covers, and every table
append of batch N carries the Delta transaction (`txnAppId` = "otel-delta-stream-<query id>",
`txnVersion` = N). The query id is Spark's, kept in the checkpoint (`<checkpoint>/metadata`):
the same across restarts from that checkpoint, new for a new one, so a batch that is re-run
after a crash is skipped by Delta in the tables it already reached, and a fresh checkpoint is
never taken for a replay. The Spark session is the project's (Lakehouse.spark_session) with
Spark's Kafka source jars (jars/kafka) added to `spark.jars` for this job only.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from deltalake import Transaction

from otel_delta.admin import AdminThread
from otel_delta.backfill import ledger
from otel_delta.backfill.distributed import BLOBS_PER_ARROW_BATCH, decode_blobs
from otel_delta.config import AdminSettings, Settings, StreamSettings
from otel_delta.engines.spark import SparkEngine, spark_schema
from otel_delta.errors import ConfigError
from otel_delta.faults import crash_point
from otel_delta.lakehouse import Lakehouse, table_uri
from otel_delta.stream.convert import MESSAGE_COLUMNS, STAGED, STATS, convert_task
from otel_delta.stream.progress import StreamStatus
from otel_delta.tables import TABLES
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "_stream_checkpoints"
APP_ID_PREFIX = "otel-delta-stream-"
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
QUERY_ID_TIMEOUT = 60.0


class StreamFailed(Exception):
    """The streaming query stopped with an error (Spark's, first line)."""


def checkpoint_location(settings: Settings) -> str:
    configured = settings.stream.checkpoint_location
    return configured or table_uri(settings.deltalake.resolved_table_path(), CHECKPOINT_DIR)


def check(stream: StreamSettings) -> dict[str, str]:
    """The topics to read (topic → signal); a ConfigError if there is nothing to read."""
    if not stream.bootstrap_servers.strip():
        raise ConfigError("config error: stream.bootstrap_servers: required by `otel-delta stream`")
    topics = stream.topics()
    if not topics:
        raise ConfigError(
            "config error: stream: traces_topic, metrics_topic and logs_topic are all empty"
        )
    return topics


def stream_session(lakehouse: Lakehouse) -> SparkSession:
    from otel_delta.spark.session import delta_jars, kafka_jars

    jars = [str(p) for p in (*delta_jars(), *kafka_jars())]
    extra = lakehouse.spark.conf.get("spark.jars", "")
    jars += [j for j in extra.split(",") if j]
    return lakehouse.spark_session(conf={"spark.jars": ",".join(jars)})


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
    """The `foreachBatch` function: convert in the executors, then one append per table."""

    def __init__(self, engine: SparkEngine, topics: dict[str, str], status: StreamStatus) -> None:
        self.engine = engine
        self.topics = topics
        self.status = status
        self.app_id: str | None = None
        self._ready = threading.Event()

    def bind(self, query_id: str) -> None:
        self.app_id = f"{APP_ID_PREFIX}{query_id}"
        self._ready.set()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        if not self._ready.wait(QUERY_ID_TIMEOUT):
            raise StreamFailed("the streaming query's id never became known")
        started = time.monotonic()
        spark = frame.sparkSession
        lakehouse = self.engine.lakehouse
        staged = (
            frame.select(*MESSAGE_COLUMNS)
            .mapInArrow(convert_task(self.topics), spark_schema(STAGED))
            .persist(StorageLevel.DISK_ONLY)
        )
        try:
            outline = {
                row["table"]: (int(row["rows"] or 0), int(row["rejected"] or 0))
                for row in staged.groupBy("table")
                .agg(F.sum("rows").alias("rows"), F.sum("rejected").alias("rejected"))
                .collect()
            }
            messages, rejected = outline.pop(STATS, (0, 0))
            steps = [f"convert {time.monotonic() - started:.1f} s"]
            txn = Transaction(self.app_id, batch_id)
            previous = spark.conf.get(ARROW_BATCH)
            spark.conf.set(ARROW_BATCH, str(BLOBS_PER_ARROW_BATCH))
            try:
                for name in sorted(outline):
                    table_started = time.monotonic()
                    schema = DEAD_LETTERS if name == DEAD_LETTER_TABLE else TABLES[name].schema
                    rows = (
                        staged.where(F.col("table") == name)
                        .select("ipc")
                        .mapInArrow(decode_blobs, spark_schema(schema))
                    )
                    if name == DEAD_LETTER_TABLE:
                        uri = ledger.ensure_aux_table(lakehouse.root, name, lakehouse.storage)
                        self.engine.save(name, uri, rows, txn)
                    else:
                        self.engine.append_frame(name, rows, txn)
                    crash_point("stream-table-committed")
                    steps.append(f"{name} {time.monotonic() - table_started:.1f} s")
            finally:
                spark.conf.set(ARROW_BATCH, previous)
        finally:
            staged.unpersist()
        seconds = time.monotonic() - started
        stored = sum(rows for name, (rows, _) in outline.items() if name != DEAD_LETTER_TABLE)
        dead = outline.get(DEAD_LETTER_TABLE, (0, 0))[0]
        self.status.batch_done(
            messages,
            {n: r for n, (r, _) in outline.items() if n != DEAD_LETTER_TABLE},
            dead,
            rejected,
            seconds,
        )
        log.info(
            "batch %d: %d message(s) → %s; %d dead letter(s), %d rejected item(s); "
            "%.1f s (%s), %.0f rows/s",
            batch_id,
            messages,
            ", ".join(f"{n} {r}" for n, (r, _) in sorted(outline.items())) or "nothing",
            dead,
            rejected,
            seconds,
            ", ".join(steps),
            stored / seconds if seconds > 0 else 0.0,
        )


def run_stream(settings: Settings, once: bool, stop: threading.Event | None = None) -> None:
    """Run the query until the topics are drained (`once`) or until `stop` / SIGTERM / SIGINT;
    a query failure raises StreamFailed. The admin endpoint listens first, so a port in use is
    one line before Spark starts."""
    stream = settings.stream
    topics = check(stream)
    status = StreamStatus(topics)
    admin = None
    if stream.admin_endpoint:
        admin = AdminThread(
            AdminSettings(endpoint=stream.admin_endpoint),
            status.checks,
            status.gauges,
            "stream.admin_endpoint",
        )
        port = admin.start()
        log.info("/metrics, /healthz and /readyz on %s", _with_port(stream.admin_endpoint, port))
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
    lakehouse = Lakehouse.from_settings(settings)
    spark = stream_session(lakehouse)
    engine = SparkEngine(lakehouse, spark)
    handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            handlers[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        writer = BatchWriter(engine, topics, status)
        location = checkpoint_location(settings)
        trigger: dict[str, Any] = (
            {"availableNow": True}
            if once
            else {"processingTime": f"{stream.trigger_interval_seconds} seconds"}
        )
        query = (
            kafka_source(spark, stream, topics)
            .writeStream.queryName("otel-delta-stream")
            .foreachBatch(writer)
            .option("checkpointLocation", location)
            .trigger(**trigger)
            .start()
        )
        writer.bind(str(query.id))
        status.active = True
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
                status.observe(query.lastProgress)
        except Exception as exc:
            status.failure = _first_line(exc)
            raise StreamFailed(status.failure) from exc
        status.observe(query.lastProgress)  # the last batch of an availableNow run
        if query.isActive:
            log.info("stopping the streaming query")
            query.stop()
        failure = query.exception()
        if failure is not None:
            status.failure = _first_line(failure)
            raise StreamFailed(status.failure)
    finally:
        status.active = False
        for signum, previous in handlers.items():
            signal.signal(signum, previous)
        spark.stop()


def _with_port(endpoint: str, port: int) -> str:
    return f"{endpoint.rpartition(':')[0]}:{port}"


def _first_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
