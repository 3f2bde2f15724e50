"""The backfill's loads as they start and finish (`_backfill_batches`), and what the next run does
with a load that a crash stopped half way.

A load commits each table, then records its files in the ledger (ledger.py). Its table commits
carry the Delta txn id of its batch, a hash of its set of files, so a re-run of the same set
skips the tables committed already. A run given another set (the folder a file exporter writes
to has new files since: a backfill run from cron) has another batch, and would commit the
stopped load's rows a second time. So a load writes its files here before its first table
commit, and a finished row after its ledger append; the next run, holding the backfill lease,
looks at every load started and not finished before it plans its own (a load is an
`attempt`: the same set of files, so the same batch, is loaded again after a load that
committed nothing, and the first load's finished row must not hide the second's end):

- recorded in the ledger (the crash came after the ledger append): marked finished;
- committed to no table: nothing of it is stored; marked finished, its files load as any other;
- committed to some table: loaded again as the same batch (`Resume`), so the tables that have
  its rows skip it and the others get them, then recorded. Its files are found by hash among the
  run's own files, else at the paths it read them from; if some are gone, all of its files are
  held back from the run (one line says so) until a run is given them, as loading any of them
  in another batch would store the rows committed already twice.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from otel_delta.backfill import ledger
from otel_delta.backfill.files import Format
from otel_delta.backfill.plan import PlannedFile
from otel_delta.backfill.stage import file_sha256
from otel_delta.errors import store_errors_named
from otel_delta.lakehouse import Lakehouse, bookkeeping_table, table_uri
from otel_delta.tables import TABLES
from otel_delta.tables.schemas import (
    BACKFILL_BATCHES,
    BATCHES_TABLE,
    DEAD_LETTER_TABLE,
)

STARTED = "started"
FINISHED = "finished"


@dataclass(frozen=True)
class Resume:
    """A stopped load to finish: its batch, its files where they are now, its format, and the
    loads of it that stopped (finished once it is)."""

    batch: str
    files: list[PlannedFile]
    fmt: Format
    attempts: list[str]


@dataclass
class _Started:
    batch: str
    files: dict[str, str]  # SHA-256 → the path the load read it from
    fmt: Format
    attempts: list[str]


def start(
    root: str,
    batch: str,
    files: list[PlannedFile],
    fmt: Format,
    storage: dict[str, str] | None = None,
) -> str:
    """Write the load's files before its first table commit; the load's attempt id."""
    attempt = uuid.uuid4().hex
    now = datetime.now(UTC)
    rows = [
        {
            "batch_id": batch,
            "attempt": attempt,
            "event": STARTED,
            "file_sha256": f.sha256,
            "file": f.path,
            "at": now,
        }
        for f in files
    ]
    rows[0]["format"] = fmt  # one row says it: the load is read again as it was read
    _append(root, rows, storage)
    return attempt


def finish(
    root: str, batch: str, attempts: list[str], storage: dict[str, str] | None = None
) -> None:
    """Mark loads of `batch` finished: recorded in the ledger, or nothing of them committed."""
    now = datetime.now(UTC)
    rows = [
        {"batch_id": batch, "attempt": attempt, "event": FINISHED, "at": now}
        for attempt in attempts
    ]
    _append(root, rows, storage)


def _append(root: str, rows: list[dict], storage: dict[str, str] | None) -> None:
    data = pa.Table.from_pylist(rows, schema=BACKFILL_BATCHES)
    uri = bookkeeping_table(root, BATCHES_TABLE, storage)
    write_deltalake(uri, data, mode="append", storage_options=storage or None)


def any_unfinished(root: str, storage: dict[str, str] | None = None) -> bool:
    return bool(_open_attempts(_events(root, ["attempt", "event"], storage)))


def _events(
    root: str, columns: list[str], storage: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The table's rows, these columns of them (none before the first load)."""
    try:
        table = DeltaTable(table_uri(root, BATCHES_TABLE), storage_options=storage or None)
    except TableNotFoundError:
        return []
    return table.to_pyarrow_table(columns=columns).to_pylist()


def _open_attempts(events: list[dict[str, Any]]) -> set[str]:
    """The attempts started and not finished."""
    finished = {row["attempt"] for row in events if row["event"] == FINISHED}
    return {row["attempt"] for row in events} - finished


def _unfinished(root: str, storage: dict[str, str] | None = None) -> list[_Started]:
    """The loads started and not finished, by batch (a batch loaded twice, stopped twice)."""
    events = _events(
        root, ["batch_id", "attempt", "event", "file_sha256", "file", "format"], storage
    )
    attempts = _open_attempts(events)
    started: dict[str, _Started] = {}
    for row in events:
        if row["event"] != STARTED or row["attempt"] not in attempts:
            continue
        load = started.setdefault(row["batch_id"], _Started(row["batch_id"], {}, "auto", []))
        load.files[row["file_sha256"]] = row["file"]
        if row["attempt"] not in load.attempts:
            load.attempts.append(row["attempt"])
        if row["format"]:
            load.fmt = row["format"]
    return sorted(started.values(), key=lambda load: load.batch)


def committed_to(lakehouse: Lakehouse, batch: str) -> list[str]:
    """The tables holding a commit of the load (its txn id)."""
    app = ledger.app_id(batch)
    committed = []
    for name in [*TABLES, DEAD_LETTER_TABLE]:
        with store_errors_named(name, lakehouse.uri(name)):  # the table that failed, by name
            if ledger.committed(lakehouse.uri(name), app, lakehouse.storage):
                committed.append(name)
    return committed


def _found(sha256: str, path: str, given: dict[str, PlannedFile]) -> PlannedFile | None:
    """The file with this content: one the run was given, else the one at its old path."""
    if sha256 in given:
        return given[sha256]
    try:
        if os.path.isfile(path) and file_sha256(path) == sha256:
            return PlannedFile(path, sha256)
    except OSError:
        pass
    return None


def to_finish(
    lakehouse: Lakehouse,
    given: list[PlannedFile],
    recorded: set[str],
    say: Callable[[str], None],
) -> tuple[list[Resume], set[str]]:
    """The stopped loads to load again now, and the SHA-256 of the files to hold back from
    this run (those of a stopped load that cannot be finished yet); `recorded`: the batches
    the ledger records. Marks the loads that need nothing more finished. The caller holds the
    backfill lease. A store that fails is said of the table it failed on."""
    root, storage = lakehouse.root, lakehouse.storage
    with store_errors_named(BATCHES_TABLE, lakehouse.uri(BATCHES_TABLE)):
        stopped = _unfinished(root, storage)
    if not stopped:
        return [], set()
    by_hash = {f.sha256: f for f in given}
    resumes: list[Resume] = []
    held_back: set[str] = set()
    for load in stopped:
        tables = [] if load.batch in recorded else committed_to(lakehouse, load.batch)
        if not tables:
            with store_errors_named(BATCHES_TABLE, lakehouse.uri(BATCHES_TABLE)):
                finish(root, load.batch, load.attempts, storage)
            continue
        found = {sha: _found(sha, path, by_hash) for sha, path in load.files.items()}
        missing = sorted(load.files[sha] for sha, there in found.items() if there is None)
        if not missing:
            files = [there for there in found.values() if there is not None]
            files.sort(key=lambda f: f.path)
            resumes.append(Resume(load.batch, files, load.fmt, load.attempts))
            continue
        held_back |= set(load.files)
        say(
            f"otel-delta: an earlier backfill stopped after committing rows of {len(load.files)} "
            f"file(s) to {', '.join(tables)} without recording them, and {len(missing)} of "
            f"them are not here ({missing[0]}): those {len(load.files)} file(s) are held back "
            "until a run is given them, to load each row once"
        )
    return resumes, held_back
