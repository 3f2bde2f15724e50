"""The one place that decides which engine runs a write or an operation.

`[deltalake.operations] engine`:
- "delta-rs": everything in-process, never a JVM;
- "spark": everything on Spark;
- "auto" (default): an append or merge of at least `bulk_threshold_rows` rows, and every bulk
  load (backfill), goes to Spark; everything else — every live ingest commit (at most
  `buffer.max_rows` rows), delete, optimize, vacuum, restore — to delta-rs.
Spark is started only when it is first chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import Transaction

from otel_delta.engines.base import Engine, EngineName, check_engine
from otel_delta.engines.delta_rs import DeltaRsEngine
from otel_delta.engines.spark import SparkEngine
from otel_delta.lakehouse import Lakehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Engines:
    """Both engines of one lakehouse, and the choice between them."""

    def __init__(
        self,
        lakehouse: Lakehouse,
        mode: EngineName = "auto",
        bulk_threshold_rows: int = 500_000,
        spark: SparkSession | Callable[[], SparkSession] | None = None,
    ) -> None:
        self.lakehouse = lakehouse
        self.mode = check_engine(mode)
        self.bulk_threshold_rows = bulk_threshold_rows
        self.delta_rs = DeltaRsEngine(lakehouse)
        self.spark = SparkEngine(lakehouse, spark)

    def pick(self, rows: int | None = None, mode: EngineName | None = None) -> Engine:
        """The engine for a write of `rows` rows (None: an operation that writes no new rows),
        under `mode` (default: the configured one)."""
        mode = check_engine(mode) if mode is not None else self.mode
        if mode == "spark":
            return self.spark
        if mode == "auto" and rows is not None and rows >= self.bulk_threshold_rows:
            return self.spark
        return self.delta_rs

    def pick_bulk_load(self, mode: EngineName | None = None) -> Engine:
        """The engine of a bulk load whose size is unknown up front (backfill)."""
        mode = check_engine(mode) if mode is not None else self.mode
        return self.delta_rs if mode == "delta-rs" else self.spark

    def append(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None = None
    ) -> int:
        """The bridge's commits (a TableWriter for the buffer)."""
        return self.pick(data.num_rows).append(table_name, data, app_transaction)

    def spread(self, wide: bool) -> None:
        """The bridge's commits may use every core (Spark's always do)."""
        self.delta_rs.spread(wide)

    def yield_while(self, condition: Callable[[], bool]) -> None:
        self.delta_rs.yield_while(condition)
