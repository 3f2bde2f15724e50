"""The `_audit` table: one record per hard delete or redaction, at the root of the table path.

When, who, which table, the condition with its literals replaced by keyed hashes, how many rows
and files, and the versions before and after: enough to show an erasure request was carried
out, and never the erased values themselves (a keyed hash can be matched against a value one
already knows, with the key, and nothing more).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from otel_delta.lakehouse import Lakehouse
from otel_delta.tables.schemas import AUDIT, AUDIT_TABLE


@dataclass(frozen=True)
class AuditRecord:
    actor: str
    operation: str  # hard_delete | redact
    table_name: str
    predicate: str  # already hashed (Predicate.with_hashed_literals)
    rows_affected: int
    files_purged: int
    log_entries_removed: int
    version_before: int
    version_after: int


def append(lakehouse: Lakehouse, record: AuditRecord) -> None:
    """Append the record (the table is created on first use, unpartitioned)."""
    row = {"at": datetime.now(UTC), **asdict(record)}
    write_deltalake(
        lakehouse.bookkeeping_table(AUDIT_TABLE),
        pa.Table.from_pylist([row], schema=AUDIT),
        mode="append",
        storage_options=lakehouse.storage,
        commit_properties=lakehouse.commit_properties(),
    )


def read(lakehouse: Lakehouse) -> pa.Table:
    """Every audit record so far (an empty table if there is none yet)."""
    uri = lakehouse.uri(AUDIT_TABLE)
    if not DeltaTable.is_deltatable(uri, storage_options=lakehouse.storage):
        return AUDIT.empty_table()
    return DeltaTable(uri, storage_options=lakehouse.storage).to_pyarrow_table()
