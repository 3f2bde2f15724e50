"""`DeltaLakeConnector`: the telemetry lakehouse as a Python API (tables, engines, retries)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound

from otel_delta.bridge import writer_options
from otel_delta.config import Settings, load_settings
from otel_delta.connector.engine import Engine, check_engine
from otel_delta.errors import OtelDeltaError, TableNotFoundError
from otel_delta.tables import TABLES
from otel_delta.writer.delta_rs import DeltaRsWriter, table_uri

if TYPE_CHECKING:
    import pyarrow as pa

    from otel_delta.connector.table import Table


class DeltaLakeConnector:
    """Opens the seven telemetry tables under `deltalake.table_path`.

    engine: "delta-rs" (default, in-process) or "spark" for the heavy operations (merge, delete,
    optimize, vacuum); every call also takes `engine=` to override. `spark` may be an existing
    SparkSession; otherwise one is started on first use via otel_delta.spark.session.
    """

    def __init__(
        self,
        config: Settings | str | Path | None = None,
        *,
        engine: Engine = "delta-rs",
        spark: Any = None,
    ) -> None:
        if config is None or isinstance(config, str | Path):
            config = load_settings(config)
        self.config: Settings = config
        self.engine: Engine = check_engine(engine)
        self._spark = spark
        self.writer = DeltaRsWriter(writer_options(config))

    @property
    def root(self) -> str:
        """The lakehouse root every table lives under."""
        return self.config.deltalake.resolved_table_path()

    @property
    def storage_options(self) -> dict[str, str] | None:
        return dict(self.config.deltalake.storage.options) or None

    def uri(self, name: str) -> str:
        return table_uri(self.root, name)

    def spark(self) -> Any:
        """The SparkSession used by engine="spark" (started lazily, offline, with Delta jars)."""
        from otel_delta.connector import spark_engine

        if self._spark is None:
            from otel_delta.spark.session import spark_session

            self._spark = spark_session(self.config.spark)
            spark_engine.size_for_local(self._spark)
        spark_engine.use_codec(self._spark, self.config.deltalake.table.compression)
        return self._spark

    def table(self, name: str) -> Table:
        """An existing telemetry table; TableNotFoundError if it is unknown or not created yet."""
        from otel_delta.connector.table import Table

        if name not in TABLES:
            raise TableNotFoundError(name)
        try:
            handle = DeltaTable(self.uri(name), storage_options=self.storage_options)
        except DeltaTableNotFound:
            raise TableNotFoundError(name, self.uri(name)) from None
        return Table(self, name, handle)

    def get_or_create_table(self, name: str) -> Table:
        """The table, created exactly as the bridge's writer creates it if it does not exist."""
        from otel_delta.connector.table import Table

        if name not in TABLES:
            raise TableNotFoundError(name)
        self.writer.open(name)  # the writer owns creation: same schema, partitions, properties
        return Table(self, name, DeltaTable(self.uri(name), storage_options=self.storage_options))

    def list_tables(self) -> list[str]:
        """Names of the telemetry tables that exist under the root, in schema order."""
        found = []
        for name in TABLES:
            if DeltaTable.is_deltatable(self.uri(name), storage_options=self.storage_options):
                found.append(name)
        return found

    def delete_table(self, name: str) -> None:
        """Remove the table and all its files; TableNotFoundError if absent."""
        self.table(name)  # raises when missing
        uri = self.uri(name)
        if "://" in uri and not uri.startswith("file://"):
            raise OtelDeltaError(f"delete_table supports local lakehouses only, not {uri}")
        shutil.rmtree(uri.removeprefix("file://"))
        self.writer.forget(name)

    def forget_writer_handle(self, name: str) -> None:
        """After a schema change: the writer reloads the table before its next append."""
        self.writer.forget(name)

    def trace(self, trace_id: str) -> pa.Table:
        """All spans of one trace, sorted by start time (see Table.trace)."""
        return self.table("spans").trace(trace_id)
