"""The backfill on Spark: files are split across tasks, each converts its files with our
converters, and the job commits once per table.

Stage 1 (one task per file, up to MAX_TASKS): `mapInArrow` over a DataFrame of (path, hash)
converts each file and emits its Arrow tables as IPC blobs, tagged with the table name, plus a
stats row per file; the result is persisted so conversion runs once. Stage 2, per table: the
blobs of that table are decoded back to Arrow batches (`mapInArrow` again, with the table's own
schema) and appended in one Delta commit carrying the load's `txn` id. Input files must be
readable at the same path by the driver and every executor (shared filesystem).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import Transaction

from otel_delta.backfill import ledger
from otel_delta.backfill.files import Format
from otel_delta.backfill.plan import Loaded, PlannedFile
from otel_delta.backfill.progress import Progress
from otel_delta.backfill.stage import stage_file
from otel_delta.engines.spark import SparkEngine, spark_schema
from otel_delta.ipc import from_ipc, to_ipc
from otel_delta.tables import TABLES
from otel_delta.tables.schemas import DEAD_LETTERS

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import Column, DataFrame

MAX_TASKS = 1000
# A blob is one binary cell, copied whole into the JVM's row buffers: a few MiB each keeps a
# task's heap small (50k-row blobs ran a 1 GiB local driver out of memory on 200k spans)
ROWS_PER_BLOB = 4096
BLOBS_PER_ARROW_BATCH = 8  # blobs handed to one decode call, instead of Spark's 10,000 rows
STATS = ""  # `table` of a file's stats row

STAGED = pa.schema(
    [
        pa.field("file_sha256", pa.string()),
        pa.field("table", pa.string()),
        pa.field("records", pa.int64()),
        pa.field("decoded", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("rejected", pa.int64()),
        pa.field("dead_letters", pa.int64()),
        pa.field("ipc", pa.binary()),
    ]
)


def blobs(name: str, table: pa.Table) -> Iterator[dict]:
    """`table` as IPC blobs of at most ROWS_PER_BLOB rows: {"table", "rows", "ipc"} each
    (also the stream's per-batch staging, otel_delta.stream.convert)."""
    for i in range(0, table.num_rows, ROWS_PER_BLOB):
        chunk = table.slice(i, ROWS_PER_BLOB)
        yield {"table": name, "rows": chunk.num_rows, "ipc": to_ipc(chunk)}


def staged_rows(
    path: str, sha256: str, fmt: Format, partition_by: Sequence[str] = ()
) -> list[dict]:
    """Convert one file; its tables as IPC blobs plus one stats row."""
    staged = stage_file(path, sha256, fmt, partition_by)
    outputs = {name: staged.table(name) for name in staged.tables}
    if staged.dead:
        outputs[ledger.DEAD_LETTER_TABLE] = staged.dead_letters()
    rows = [
        {"file_sha256": sha256, **blob}
        for name, table in outputs.items()
        for blob in blobs(name, table)
    ]
    rows.append(
        {
            "file_sha256": sha256,
            "table": STATS,
            "records": staged.records,
            "decoded": staged.decoded,
            "rows": staged.rows,
            "rejected": staged.rejected,
            "dead_letters": len(staged.dead),
        }
    )
    return rows


def _stage_task(
    fmt: Format,
    partition_by: tuple[str, ...],
    files_done: Accumulator[int],
    rows_done: Accumulator[int],
) -> Callable:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for path, sha256 in zip(
                batch.column("path").to_pylist(), batch.column("sha256").to_pylist(), strict=True
            ):
                rows = staged_rows(path, sha256, fmt, partition_by)
                yield pa.RecordBatch.from_pylist(rows, schema=STAGED)
                files_done.add(1)
                rows_done.add(rows[-1]["rows"])

    return run


def decode_blobs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for blob in batch.column(0):
            yield from from_ipc(blob.as_buffer()).to_batches()


def run_spark(
    files: list[PlannedFile], fmt: Format, engine: SparkEngine, batch: str, progress: Progress
) -> Loaded:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = engine.session
    lakehouse = engine.lakehouse
    context = spark.sparkContext
    files_done, rows_done = context.accumulator(0), context.accumulator(0)
    paths = context.parallelize(
        [(f.path, f.sha256) for f in files], max(1, min(len(files), MAX_TASKS))
    ).toDF("path string, sha256 string")
    task = _stage_task(fmt, tuple(lakehouse.partition_by), files_done, rows_done)
    staged = paths.mapInArrow(task, spark_schema(STAGED))
    # on disk, not in the heap: the blobs are read once per table and are large
    staged = staged.persist(StorageLevel.DISK_ONLY)

    stop = threading.Event()

    def report() -> None:
        while not stop.wait(0.5):
            progress.update(files_done.value, rows_done.value)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    try:
        # everything but the blobs: small, and one job that converts every file
        outline = staged.drop("ipc").collect()
    finally:
        stop.set()
        reporter.join()
    by_hash = {row.file_sha256: row for row in outline if row.table == STATS}
    loaded = Loaded()
    for planned in files:
        row = by_hash[planned.sha256]
        loaded.add_file(planned, row.records, row.rows, row.rejected, row.dead_letters, row.decoded)
    progress.update(len(files), loaded.total_rows)
    # files not loaded have only dead letters: they stay out of the load's commits (its txn id
    # comes back when the same files are loaded later), and a file that has dead letters
    # already gets none again (as in ledger.append_dead_letters_of_unloaded)
    unloaded = sorted(f["file_sha256"] for f in loaded.not_loaded)
    written = ledger.dead_letters_written(lakehouse.root, unloaded, lakehouse.storage)
    unloaded_new = [sha256 for sha256 in unloaded if sha256 not in written]
    per_table: dict[str, int] = {}  # of the files loaded
    not_loaded = set(unloaded)
    for row in outline:
        if row.table != STATS and row.file_sha256 not in not_loaded:
            per_table[row.table] = per_table.get(row.table, 0) + row.rows
    app = ledger.app_id(batch)
    txn = Transaction(app, ledger.TXN_VERSION)
    batch_conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous_batch = spark.conf.get(batch_conf)
    spark.conf.set(batch_conf, str(BLOBS_PER_ARROW_BATCH))

    def rows_of(name: str, files: Column | None = None) -> DataFrame:
        schema = DEAD_LETTERS if name == ledger.DEAD_LETTER_TABLE else TABLES[name].schema
        blobs_of = F.col("table") == name
        return (
            staged.where(blobs_of if files is None else blobs_of & files)
            .select("ipc")
            .mapInArrow(decode_blobs, spark_schema(schema))
        )

    try:
        for name, rows in per_table.items():
            if name == ledger.DEAD_LETTER_TABLE:
                uri = lakehouse.bookkeeping_table(name)
                engine.save(name, uri, rows_of(name, ~F.col("file_sha256").isin(unloaded)), txn)
                continue
            loaded.rows[name] = rows
            if ledger.committed(lakehouse.uri(name), app, lakehouse.storage):
                loaded.skipped_commits.append(name)
                continue
            engine.append_frame(name, rows_of(name), txn)
        if unloaded_new:
            name = ledger.DEAD_LETTER_TABLE
            uri = lakehouse.bookkeeping_table(name)
            engine.save(name, uri, rows_of(name, F.col("file_sha256").isin(unloaded_new)))
    finally:
        spark.conf.set(batch_conf, previous_batch)
        staged.unpersist()
    return loaded
