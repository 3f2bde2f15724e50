"""`DeltaLakeConnector`: the telemetry lakehouse as a Python API (tables, engines, retries)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from otel_delta.config import Settings, load_settings
from otel_delta.connector.operation_metrics import OperationMetrics, OperationStats
from otel_delta.engines import EngineName, Engines
from otel_delta.errors import StoreUnavailableError, TableNotFoundError, describe
from otel_delta.lakehouse import Lakehouse
from otel_delta.tables import TABLES

if TYPE_CHECKING:
    import pyarrow as pa

    from otel_delta.connector.table import Table


class DeltaLakeConnector:
    """Opens the seven telemetry tables under `deltalake.table_path`.

    engine: which engine runs writes and operations — `[deltalake.operations] engine` unless
    given here ("auto": delta-rs in-process, Spark for merges and inserts of at least
    `bulk_threshold_rows` rows; "delta-rs" or "spark" force one); every call also takes
    `engine=` to override. `spark` may be an existing SparkSession; otherwise one is started on
    first use from the `[spark]` settings.
    """

    def __init__(
        self,
        config: Settings | str | Path | None = None,
        *,
        engine: EngineName | None = None,
        spark: Any = None,
    ) -> None:
        if config is None or isinstance(config, str | Path):
            config = load_settings(config)
        self.config: Settings = config
        self.lakehouse = Lakehouse.from_settings(config)
        self.operations = OperationMetrics()
        operations = config.deltalake.operations
        self.engines = Engines(
            self.lakehouse,
            engine if engine is not None else operations.engine,
            operations.bulk_threshold_rows,
            spark,
        )

    @property
    def engine(self) -> EngineName:
        """The default engine of this connector's calls."""
        return self.engines.mode

    @property
    def root(self) -> str:
        """The lakehouse root every table lives under."""
        return self.lakehouse.root

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self.lakehouse.storage

    def uri(self, name: str) -> str:
        return self.lakehouse.uri(name)

    def spark(self) -> Any:
        """The SparkSession of the Spark engine (started lazily, offline, with Delta jars)."""
        return self.engines.spark.session

    def table(self, name: str) -> Table:
        """An existing telemetry table; TableNotFoundError if it is unknown or not created yet,
        StoreUnavailableError if its store does not answer or refuses (delta-rs raises OSError
        then, whose first line is only "Generic S3 error")."""
        from otel_delta.connector.table import Table

        if name not in TABLES:
            raise TableNotFoundError(name)
        try:
            delta = self.lakehouse.open_table(name)
        except OSError as exc:
            raise StoreUnavailableError(name, self.uri(name), describe(exc)) from None
        return Table(self, name, delta)

    def get_or_create_table(self, name: str) -> Table:
        """The table, created exactly as the bridge creates it if it does not exist."""
        from otel_delta.connector.table import Table

        if name not in TABLES:
            raise TableNotFoundError(name)
        return Table(self, name, self.lakehouse.create_table(name))

    def list_tables(self) -> list[str]:
        """Names of the telemetry tables that exist under the root, in schema order;
        StoreUnavailableError, as `table` raises it, when the store does not answer or refuses
        (an `otel-delta tables` on a refused SAS token said only "Generic MicrosoftAzure error")."""
        found = []
        for name in TABLES:
            try:
                if self.lakehouse.exists(name):
                    found.append(name)
            except OSError as exc:
                raise StoreUnavailableError(name, self.uri(name), describe(exc)) from None
        return found

    def delete_table(self, name: str) -> None:
        """Remove the table and all its files (local or S3); TableNotFoundError if absent."""
        self.table(name)  # raises when missing
        self.lakehouse.remove_table(name)
        self.engines.delta_rs.forget(name)

    def operation_metrics(self) -> dict[str, OperationStats]:
        """Per operation over every table in this process: count, errors, rows, p50/p99
        latency and the last error (`Table.operation_metrics()` for one table)."""
        return self.operations.snapshot()

    def audit_log(self) -> pa.Table:
        """The `_audit` table: one record per hard delete or redaction (empty if none)."""
        from otel_delta.connector import audit

        return audit.read(self.lakehouse)

    def forget_writer_handle(self, name: str) -> None:
        """After a schema change: the delta-rs engine reloads the table before its next append."""
        self.engines.delta_rs.forget(name)

    def trace(self, trace_id: str) -> pa.Table:
        """All spans of one trace, sorted by start time (see Table.trace); none while the lake
        has no spans table yet (a lake that has received only logs or metrics so far)."""
        try:
            spans = self.table("spans")
        except TableNotFoundError:
            from otel_delta.connector.table import checked_trace_id

            checked_trace_id(trace_id)
            return TABLES["spans"].schema.empty_table()
        return spans.trace(trace_id)
