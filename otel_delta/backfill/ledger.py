"""What was loaded: the `_backfill_files` table and the Delta `txn` ids of backfill commits.

Idempotency, in two layers:
- files are keyed by the SHA-256 of their bytes; a file whose hash is in `_backfill_files` is
  skipped, so re-running the same files, or an overlapping set, loads only the new ones;
- the commits of one load carry the Delta transaction id `otel-delta-backfill-<batch>` (batch =
  hash of the new files' hashes), so a load that died after some table commits and is re-run
  with the same files skips the tables already committed (Spark skips a recorded txn itself;
  the delta-rs path checks `transaction_version`) and then records the files. Two runs of the
  same files at once commit each table's rows once for the same reason; the one whose ledger
  append finds the batch recorded counts its files as already loaded (run.py).

Runs into one lake take turns (`one_run_at_a_time`): two runs at once over overlapping sets
(a+b, b+c) have different batches, so the txn ids cannot tell their commits of b apart, and
both would plan b on a ledger without it. A run holds the backfill lease on the ledger table
(engines/lease.py, its own app id) from its planning to its ledger append, so the next run
plans on a ledger that has the first's files.

A file that gave only dead letters (`stage.nothing_decoded`) is not recorded, and its dead
letters are not part of the load's commit: they are written unless the file has dead letters
already, so retrying such a file (every run does, until it loads) writes them once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from otel_delta.engines.lease import Leases, now_ms
from otel_delta.errors import LeaseHeldError, store_errors_named
from otel_delta.lakehouse import append_once as append_once_to
from otel_delta.lakehouse import bookkeeping_table, holds_transaction, table_uri
from otel_delta.tables.schemas import BACKFILL_FILES, DEAD_LETTER_TABLE, LEDGER_TABLE

__all__ = ["DEAD_LETTER_TABLE", "LEDGER_TABLE"]  # the tables this module keeps
TXN_VERSION = 1

BACKFILL_LEASES = Leases("otel-delta.backfill-lease", "backfill")
# short, as a run killed with kill -9 keeps the next runs waiting until its lease runs out; a
# thread of the run looks every LEASE_SECONDS / 4 and renews it (a commit on the ledger table)
# once less than half is left
LEASE_SECONDS = 60.0
WAIT_POLL_SECONDS = 1.0  # how often a waiting run looks whether the lease was released


def batch_id(hashes: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()[:32]


def app_id(batch: str) -> str:
    return f"otel-delta-backfill-{batch}"


@dataclass(frozen=True)
class Recorded:
    """What the ledger holds: the files loaded (SHA-256) and the batches that loaded them."""

    hashes: set[str]
    batches: set[str]


def recorded(root: str, storage: dict[str, str] | None = None) -> Recorded:
    try:
        table = DeltaTable(table_uri(root, LEDGER_TABLE), storage_options=storage or None)
    except TableNotFoundError:
        return Recorded(set(), set())
    rows = table.to_pyarrow_table(columns=["file_sha256", "batch_id"])
    return Recorded(set(rows["file_sha256"].to_pylist()), set(rows["batch_id"].to_pylist()))


def committed(uri: str, app: str, storage: dict[str, str] | None = None) -> bool:
    """Has a commit with this txn app id (at our version) landed in the table already?"""
    try:
        table = DeltaTable(uri, storage_options=storage or None)
    except TableNotFoundError:
        return False
    return holds_transaction(table, Transaction(app, TXN_VERSION))


def append_once(
    root: str, name: str, data: pa.Table, app: str, storage: dict[str, str] | None = None
) -> bool:
    """Append a bookkeeping table's rows unless this load's txn already did; True if written.

    No rows, no commit: an empty commit would still record the txn id, and a later load of
    the same files (the same batch id: files that loaded nothing are not in the ledger) would
    then skip the rows it has to write.
    """
    if data.num_rows == 0:
        return False
    return append_once_to(root, name, data, Transaction(app, TXN_VERSION), storage)


def dead_letters_written(
    root: str, hashes: list[str], storage: dict[str, str] | None = None
) -> set[str]:
    """Which of these files (SHA-256) have dead letters in `_dead_letters` already."""
    if not hashes:
        return set()
    try:
        table = DeltaTable(table_uri(root, DEAD_LETTER_TABLE), storage_options=storage or None)
    except TableNotFoundError:
        return set()
    found = table.to_pyarrow_table(columns=["file_sha256"], filters=[("file_sha256", "in", hashes)])
    return set(found.column(0).to_pylist())


def append_dead_letters_of_unloaded(
    root: str, per_file: dict[str, pa.Table], storage: dict[str, str] | None = None
) -> int:
    """Write the dead letters of files not loaded, but not of a file that has some already.

    Such a file is read again by every run until it loads; the same mistake twice (a wrong
    `--format`) should not double its dead letters. Returns the number of rows written.
    """
    written = dead_letters_written(root, list(per_file), storage)
    new = [dead for sha256, dead in per_file.items() if sha256 not in written]
    if not new:
        return 0
    data = pa.concat_tables(new)
    uri = bookkeeping_table(root, DEAD_LETTER_TABLE, storage)
    write_deltalake(uri, data, mode="append", storage_options=storage or None)
    return data.num_rows


@contextlib.contextmanager
def one_run_at_a_time(
    root: str, say: Callable[[str], None], storage: dict[str, str] | None = None
) -> Iterator[None]:
    """Hold the backfill lease on the ledger table (created if absent) while the block plans,
    loads and records its files; another run holding it is waited for, `say` told once.

    A run renews it while it loads (however long Spark or delta-rs take) and releases it at
    the end, error or not; a run killed with kill -9 leaves it to run out (LEASE_SECONDS).
    The wait has no end of its own: it lasts as long as another live run renews its lease."""
    told = False

    def wait(held: LeaseHeldError) -> None:
        nonlocal told
        if not told:
            until = dt.datetime.fromtimestamp(held.until_ms / 1000, UTC).strftime("%H:%M:%SZ")
            say(
                f"otel-delta: waiting for another backfill into {root.rstrip('/')} to finish "
                f"(its lease on {LEDGER_TABLE} runs until {until} unless it renews it)"
            )
            told = True
        left = (held.until_ms - now_ms()) / 1000
        time.sleep(min(WAIT_POLL_SECONDS, max(left, 0.01)))

    with contextlib.ExitStack() as turn:
        with store_errors_named(LEDGER_TABLE, table_uri(root, LEDGER_TABLE)):  # one line
            delta = DeltaTable(
                bookkeeping_table(root, LEDGER_TABLE, storage), storage_options=storage or None
            )
            turn.enter_context(BACKFILL_LEASES.holding(delta, LEASE_SECONDS, waiting=wait))
        yield


def ledger_rows(files: list[dict], batch: str) -> pa.Table:
    now = datetime.now(UTC)
    rows = [{**f, "batch_id": batch, "loaded_at": now} for f in files]
    return pa.Table.from_pylist(rows, schema=BACKFILL_FILES)
