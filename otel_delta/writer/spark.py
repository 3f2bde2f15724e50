"""Appends through delta-spark: for bulk loads and for scaling out to a Spark cluster.

The table is created (if absent) by the same code as the delta-rs writer, so its schema,
partitioning, description and properties are identical whichever engine wrote first; the session
keeps deletion vectors and row tracking off, so delta-rs can go on writing it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable

from otel_delta.errors import CommitError
from otel_delta.writer.delta_rs import DeltaRsWriter, WriterOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema (maps, lists, structs, UTC timestamps, dates)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


class SparkWriter:
    """`TableWriter` over a SparkSession; the session is started on first use, not before."""

    def __init__(self, options: WriterOptions, session_factory: Callable[[], SparkSession]) -> None:
        self.options = options
        self._session_factory = session_factory
        self._session: SparkSession | None = None
        self._start_lock = threading.Lock()
        # delta-rs creates the table and checks its schema version and partitioning
        self._tables = DeltaRsWriter(options)

    @property
    def session(self) -> SparkSession:
        with self._start_lock:
            if self._session is None:
                self._session = self._session_factory()
            return self._session

    @property
    def started(self) -> bool:
        return self._session is not None

    def uri(self, name: str) -> str:
        return self._tables.uri(name)

    def ensure_table(self, name: str) -> None:
        self._tables.open(name)

    def append(self, table_name: str, data: pa.Table) -> int:
        frame = self.session.createDataFrame(data)
        return self.append_frame(table_name, frame)

    def append_frame(
        self,
        table_name: str,
        frame: DataFrame,
        app_id: str | None = None,
        app_version: int | None = None,
        user_metadata: str | None = None,
    ) -> int:
        """One Delta commit of `frame`; with `app_id`, Delta skips it if that txn is recorded."""
        self.ensure_table(table_name)
        return self.save(
            table_name, self.uri(table_name), frame, app_id, app_version, user_metadata
        )

    def save(
        self,
        label: str,
        uri: str,
        frame: DataFrame,
        app_id: str | None = None,
        app_version: int | None = None,
        user_metadata: str | None = None,
    ) -> int:
        """Append `frame` to the existing Delta table at `uri`; returns the latest version."""
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("compression", self.options.compression.lower())
            .option("parquet.compression.codec.zstd.level", str(self.options.compression_level))
        )
        options: dict[str, Any] = {}
        if app_id is not None:
            options["txnAppId"] = app_id
            options["txnVersion"] = str(app_version if app_version is not None else 0)
        if user_metadata is not None:
            options["userMetadata"] = user_metadata
        for key, value in options.items():
            writer = writer.option(key, value)
        try:
            writer.save(uri)
            return self._version(uri)
        except Exception as exc:  # py4j / AnalysisException: surface as our error, one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommitError(f"Spark commit to {label} failed: {first}") from exc

    def _version(self, uri: str) -> int:
        # read through delta-rs: no Spark job for a log read
        return DeltaTable(uri, storage_options=self.options.storage_options or None).version()
