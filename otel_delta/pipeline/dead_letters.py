"""The bridge's dead letters: logged requests whose rows a table refused for what they hold.

When a commit fails because of the rows themselves (a CHECK constraint a user added, a type the
table will not take), retrying would block the write-ahead log behind them forever and every
other client with it. The buffer commits the other requests' rows and hands each refused record
here: its whole request, read back from the log, goes to the `_dead_letters` table beside the
telemetry tables (the one `otel-delta backfill` uses), with the table that refused it and why,
so nothing acknowledged is lost and it can be loaded again once the table accepts it.

Each dead letter is one Delta commit carrying a transaction of the refusing table
(`<wal app id>-dead-letters-<table>`, the record's position): written again after a crash and
replay, it is not stored twice. One id per table: a table's refusals come in log order, but
two tables' do not (one waits in backoff while the other commits), and a version of a shared
id marked every earlier position as written, also the other table's dead letter still to come:
acknowledged, then stored nowhere. A request two tables refuse (a metrics request's gauge and
sum points) is a dead letter of each, with each table's reason.

Builds before 2026-11-29 13:56 (898c7d5) marked every table's dead letters with the shared id
(`<wal app id>-dead-letters`). A record such a build moved to the dead letters, then was
killed before releasing it, is replayed by this one: where the shared id's version reaches
the record, the dead letter is looked for by its row (the record's offset and the table's
reason), so an upgrade writes it once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, Transaction

from otel_delta.errors import RowsRejectedError
from otel_delta.lakehouse import BookkeepingAppends, Lakehouse
from otel_delta.metrics import DEAD_LETTERS as DEAD_LETTER_COUNT
from otel_delta.pipeline.body import inflate_logged
from otel_delta.tables.schemas import DEAD_LETTER_TABLE, DEAD_LETTERS
from otel_delta.wal import WriteAheadLog

log = logging.getLogger(__name__)


class DeadLetters:
    def __init__(self, lakehouse: Lakehouse, wal: WriteAheadLog) -> None:
        self.lakehouse = lakehouse
        self.wal = wal
        self.app_id = f"{wal.app_id}-dead-letters"  # + "-<table>": each table's own
        self.table = BookkeepingAppends(lakehouse.root, DEAD_LETTER_TABLE, lakehouse.storage)

    def transaction(self, table: str, position: int) -> Transaction:
        """The dead letter's Delta transaction: the table's own id, the record's position."""
        return Transaction(f"{self.app_id}-{table}", position)

    def write(self, table: str, position: int, error: RowsRejectedError) -> None:
        """Store the request logged at `position` as a dead letter; durable on return."""
        record = self.wal.read(position)
        row = {
            "file": f"wal:{self.wal.app_id}",
            "file_sha256": None,
            "offset": position,
            "line": None,
            "reason": f"{table}: {error}",
            "raw": inflate_logged(record.payload, record.encoding),  # protobuf, as backfill's
            "loaded_at": datetime.now(UTC),
        }
        written = self.table.append_once(
            pa.Table.from_pylist([row], schema=DEAD_LETTERS),
            self.transaction(table, position),
            found=lambda dead_letters: self._by_an_older_build(dead_letters, table, position),
        )
        if not written:
            return  # written before a crash: the record was replayed
        DEAD_LETTER_COUNT.labels(table).inc()
        log.warning(
            "the request logged at %d went to %s: %s refused its rows", position,
            DEAD_LETTER_TABLE, table,
        )  # fmt: skip

    def _by_an_older_build(self, dead_letters: DeltaTable, table: str, position: int) -> bool:
        """Did a build marking dead letters with the shared id write this one? Its id's
        version says only that every position up to it was handled, not for which table (the
        defect that id had), so the row itself is looked for."""
        shared = dead_letters.transaction_version(self.app_id)
        if shared is None or shared < position:
            return False
        rows = dead_letters.to_pyarrow_table(
            columns=["reason"],
            filters=[("file", "=", f"wal:{self.wal.app_id}"), ("offset", "=", position)],
        )
        return any(reason.startswith(f"{table}: ") for reason in rows.column("reason").to_pylist())
