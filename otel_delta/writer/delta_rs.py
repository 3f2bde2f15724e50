"""Appends through delta-rs: create-on-first-write, zstd Parquet, checkpoints, conflict retry."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import (
    CommitProperties,
    DeltaTable,
    PostCommitHookProperties,
    Transaction,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from otel_delta.errors import CommitError
from otel_delta.tables import TABLES
from otel_delta.tables.schemas import SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterOptions:
    """How tables are laid out and committed (filled from `[deltalake.*]` config)."""

    table_root: str
    partition_by: tuple[str, ...] = ("service_name", "date")
    storage_options: dict[str, str] = field(default_factory=dict)
    compression: str = "ZSTD"
    compression_level: int = 3
    target_file_size: int = 128 * 1024 * 1024
    checkpoint_interval: int = 100
    max_commit_retries: int = 15
    transient_retries: int = 3


def table_uri(table_root: str, name: str) -> str:
    return f"{table_root.rstrip('/')}/{name}"


def table_properties(options: WriterOptions) -> dict[str, str]:
    return {
        "delta.checkpointInterval": str(options.checkpoint_interval),
        SCHEMA_VERSION_PROPERTY: str(SCHEMA_VERSION),
    }


def with_evolved_columns(table: DeltaTable, data: pa.Table) -> pa.Table:
    """`data` plus NULL columns for any nullable column added to the table since (schema
    evolution through the connector), so appends keep working on an evolved table."""
    schema = pa.schema(table.schema().to_arrow())
    if len(schema) == data.num_columns:
        return data
    for column in schema:
        if column.name not in data.column_names:
            data = data.append_column(column, pa.nulls(data.num_rows, column.type))
    return data


class DeltaRsWriter:
    """One delta-rs handle per table, reused across commits so the log is read incrementally."""

    def __init__(self, options: WriterOptions) -> None:
        self.options = options
        self._tables: dict[str, DeltaTable] = {}
        self._locks = {name: threading.Lock() for name in TABLES}
        self._writer_properties = WriterProperties(
            compression=options.compression,  # type: ignore[arg-type]
            compression_level=options.compression_level,
        )

    @property
    def writer_properties(self) -> WriterProperties:
        """How this writer encodes Parquet (the connector rewrites files the same way)."""
        return self._writer_properties

    def forget(self, name: str) -> None:
        """Drop the cached handle (e.g. after a schema change), so the next commit reloads."""
        with self._locks[name]:
            self._tables.pop(name, None)

    def uri(self, name: str) -> str:
        return table_uri(self.options.table_root, name)

    def open(self, name: str) -> DeltaTable:
        """The table's handle, creating the table (schema, partitions, properties) if absent."""
        table = self._tables.get(name)
        if table is not None:
            return table
        uri = self.uri(name)
        storage = self.options.storage_options or None
        try:
            table = DeltaTable(uri, storage_options=storage)
        except TableNotFoundError:
            # mode="ignore": if another bridge created it first, we simply open theirs
            DeltaTable.create(
                uri,
                TABLES[name].schema,
                mode="ignore",
                partition_by=list(self.options.partition_by),
                name=name,
                description=TABLES[name].description,
                configuration=table_properties(self.options),
                storage_options=storage,
                raise_if_key_not_exists=False,  # our own schema-version property
            )
            table = DeltaTable(uri, storage_options=storage)
        self._check_compatible(name, table)
        self._tables[name] = table
        return table

    def _check_compatible(self, name: str, table: DeltaTable) -> None:
        metadata = table.metadata()
        found = metadata.configuration.get(SCHEMA_VERSION_PROPERTY)
        if found is not None and int(found) > SCHEMA_VERSION:
            raise CommitError(
                f"table {name} has schema version {found}, newer than this bridge's "
                f"{SCHEMA_VERSION}: upgrade otel-delta"
            )
        partitions = tuple(metadata.partition_columns)
        if partitions != self.options.partition_by:
            raise CommitError(
                f"table {name} is partitioned by {list(partitions)} but deltalake.partition_by "
                f"is {list(self.options.partition_by)}"
            )

    def append(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None = None
    ) -> int:
        """`app_transaction` (a Delta `txn` app id + version) makes a load idempotent."""
        with self._locks[table_name]:
            attempt = 0
            while True:
                attempt += 1
                try:
                    table = self.open(table_name)
                    write_deltalake(
                        table,
                        with_evolved_columns(table, data),
                        mode="append",
                        target_file_size=self.options.target_file_size,
                        writer_properties=self._writer_properties,
                        commit_properties=CommitProperties(
                            max_commit_retries=self.options.max_commit_retries,
                            app_transactions=[app_transaction] if app_transaction else None,
                        ),
                        post_commithook_properties=PostCommitHookProperties(create_checkpoint=True),
                    )
                    return table.version()
                except CommitError:
                    raise
                except (CommitFailedError, DeltaError, OSError) as exc:
                    self._tables.pop(table_name, None)  # reload the log on the next attempt
                    if attempt > self.options.transient_retries:
                        raise CommitError(
                            f"commit to {table_name} failed after {attempt} attempts: {exc}"
                        ) from exc
                    log.warning("commit to %s failed (attempt %d): %s", table_name, attempt, exc)
                    time.sleep(0.05 * 2**attempt)
