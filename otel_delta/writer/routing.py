"""Chooses the engine per append: small appends to delta-rs, bulk appends to Spark.

delta-rs commits in milliseconds without a JVM; Spark pays a session start (~10 s) and a job per
commit but scales out. In `auto`, Spark is started only when the first bulk append arrives.
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

from otel_delta.writer.base import TableWriter

Engine = Literal["auto", "delta-rs", "spark"]


class RoutingWriter:
    """`TableWriter` that sends appends of >= `bulk_threshold_rows` rows to `bulk` in `auto`."""

    def __init__(
        self,
        small: TableWriter,
        bulk: TableWriter,
        engine: Engine = "auto",
        bulk_threshold_rows: int = 500_000,
    ) -> None:
        self.small = small
        self.bulk = bulk
        self.engine = engine
        self.bulk_threshold_rows = bulk_threshold_rows

    def engine_for(self, rows: int) -> TableWriter:
        if self.engine == "spark":
            return self.bulk
        if self.engine == "delta-rs":
            return self.small
        return self.bulk if rows >= self.bulk_threshold_rows else self.small

    def append(self, table_name: str, data: pa.Table) -> int:
        return self.engine_for(data.num_rows).append(table_name, data)
