"""The heavy operations on Spark (delta-spark's Python API), for tables beyond one machine.

Each function mirrors its delta-rs counterpart in table.py and returns the same numbers;
conditions arrive already rendered by the predicate module in Spark's dialect.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from otel_delta.connector.predicates import quote_identifier

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def size_for_local(spark: Any) -> None:
    """Delta rebuilds each snapshot with 50 partitions by default: right for a cluster, but on
    the connector's own local session it makes every operation several times slower."""
    partitions = max(2, spark.sparkContext.defaultParallelism * 2)
    spark.conf.set("spark.databricks.delta.snapshotPartitions", str(partitions))


def use_codec(spark: Any, compression: str) -> None:
    """Write Parquet with the codec the bridge uses (deltalake.table.compression)."""
    codec = {"UNCOMPRESSED": "none"}.get(compression, compression.lower())
    spark.conf.set("spark.sql.parquet.compression.codec", codec)


def _delta_table(spark: Any, uri: str) -> Any:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, uri)


def _path_sql(uri: str) -> str:
    return f"delta.{quote_identifier(uri, 'spark')}"


def concurrent_errors() -> tuple[type[BaseException], ...]:
    """delta-spark's conflict exceptions, for the caller's bounded retry."""
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


def upsert(spark: Any, uri: str, source: pa.Table, condition: str) -> tuple[int, int]:
    """MERGE source into the table; returns (inserted, updated)."""
    frame = spark.createDataFrame(source)
    metrics = (
        _delta_table(spark, uri)
        .alias("t")
        .merge(frame.alias("s"), condition)
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
        .collect()[0]
    )
    return int(metrics["num_inserted_rows"]), int(metrics["num_updated_rows"])


def delete(spark: Any, uri: str, condition: str) -> int:
    row = spark.sql(f"DELETE FROM {_path_sql(uri)} WHERE {condition}").collect()
    return int(row[0]["num_affected_rows"]) if row else 0


def optimize(
    spark: Any, uri: str, where: str | None, z_order: list[str], target_size: int
) -> dict[str, Any]:
    """OPTIMIZE [WHERE partition predicate] [ZORDER BY]; returns Delta's metrics as a dict."""
    spark.conf.set(OPTIMIZE_MAX_FILE_SIZE, str(target_size))
    builder = _delta_table(spark, uri).optimize()
    if where:
        builder = builder.where(where)
    frame = builder.executeZOrderBy(*z_order) if z_order else builder.executeCompaction()
    metrics = frame.collect()[0]["metrics"]
    return metrics.asDict(recursive=True)


def vacuum(spark: Any, uri: str, retention_hours: int, dry_run: bool) -> list[str]:
    """Files vacuum removes (or would): Spark lists them only in a dry run, so list first."""
    previous = spark.conf.get(RETENTION_CHECK, "true")
    previous_listing = spark.conf.get(LISTING_PARALLELISM, "10000")
    spark.conf.set(RETENTION_CHECK, "false")  # the caller chose the retention explicitly
    # VACUUM spreads its file listing over this many tasks (default 10000): far too many
    # for one table directory on a small cluster
    spark.conf.set(LISTING_PARALLELISM, str(max(8, spark.sparkContext.defaultParallelism * 4)))
    try:
        rows = spark.sql(
            f"VACUUM {_path_sql(uri)} RETAIN {int(retention_hours)} HOURS DRY RUN"
        ).collect()
        files = [row["path"] for row in rows]
        if not dry_run and files:
            _delta_table(spark, uri).vacuum(float(retention_hours))
        return files
    finally:
        spark.conf.set(RETENTION_CHECK, previous)
        spark.conf.set(LISTING_PARALLELISM, previous_listing)
