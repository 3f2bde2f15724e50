"""`otel-delta backfill`: plan (hash, skip what was loaded), convert + commit, record the files."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from otel_delta.backfill import ledger
from otel_delta.backfill.files import Format
from otel_delta.backfill.plan import Loaded, PlannedFile, not_loaded, plan
from otel_delta.backfill.progress import Progress
from otel_delta.config import Settings
from otel_delta.engines import DeltaRsEngine, Engine, EngineName, Engines
from otel_delta.errors import BackfillError, OtelDeltaError, store_errors_named
from otel_delta.faults import pause_point
from otel_delta.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass
class BackfillReport:
    engine: str
    files_new: int
    files_skipped: int
    rows: dict[str, int] = field(default_factory=dict)
    records: int = 0
    rejected: int = 0
    dead_letters: int = 0
    skipped_commits: list[str] = field(default_factory=list)
    files_not_loaded: int = 0  # nothing decoded: not recorded, a later run may load them

    @classmethod
    def of(cls, engine: str, loaded: Loaded, skipped: int) -> BackfillReport:
        return cls(
            engine,
            len(loaded.files),
            skipped,
            dict(sorted(loaded.rows.items())),
            loaded.total("records"),
            loaded.total("rejected"),
            loaded.total("dead_letters"),
            loaded.skipped_commits,
            len(loaded.not_loaded),
        )


def backfill(
    settings: Settings,
    paths: list[str],
    fmt: Format = "auto",
    *,
    engine: EngineName | None = None,
    session_factory: Callable | None = None,
    progress_stream: TextIO | None = None,
    show_progress: bool = True,
) -> BackfillReport:
    """Load collector file-exporter output into the tables, at most once per file content.

    The engine is `[deltalake.operations] engine`: `auto` and `spark` run on Spark
    (`[spark] master`), `delta-rs` converts in this process and commits with delta-rs.
    """
    lakehouse = Lakehouse.from_settings(settings)
    operations = settings.deltalake.operations
    engines = Engines(lakehouse, operations.engine, operations.bulk_threshold_rows, session_factory)
    chosen = engines.pick_bulk_load(engine)
    try:
        loaded_before = ledger.loaded_hashes(lakehouse.root, lakehouse.storage)
    except OSError as exc:  # delta-rs: the store down, refusing the keys, no such bucket
        raise lakehouse.unusable(exc) from None
    # hashed before taking turns (runs at once read their files at once); a re-run with
    # nothing new takes no lease, nor waits for another run
    files, skipped = plan(paths, loaded_before)
    if not files:
        return BackfillReport(chosen.name, 0, skipped)
    say = _say_to(progress_stream)
    with ledger.one_run_at_a_time(lakehouse.root, say, lakehouse.storage):
        # one run at a time plans on the ledger, loads and records: the files another run
        # recorded while this one waited are skipped (two runs at once over a+b and b+c have
        # different batches, so the txn ids cannot stop both from committing b)
        with store_errors_named(ledger.LEDGER_TABLE, lakehouse.uri(ledger.LEDGER_TABLE)):
            loaded_now = ledger.loaded_hashes(lakehouse.root, lakehouse.storage)
        files, recorded_since = not_loaded(files, loaded_now)
        skipped += recorded_since
        if not files:
            return BackfillReport(chosen.name, 0, skipped)
        pause_point("backfill-planned")
        return _load(
            settings,
            lakehouse,
            engines,
            chosen,
            files,
            skipped,
            fmt,
            progress_stream,
            show_progress,
        )


def _say_to(stream: TextIO | None) -> Callable[[str], None]:
    """A line for the user, with the progress line (stderr)."""

    def say(line: str) -> None:
        print(line, file=stream or sys.stderr, flush=True)

    return say


def _load(
    settings: Settings,
    lakehouse: Lakehouse,
    engines: Engines,
    chosen: Engine,
    files: list[PlannedFile],
    skipped: int,
    fmt: Format,
    progress_stream: TextIO | None,
    show_progress: bool,
) -> BackfillReport:
    """Convert and commit the planned files, then record them (the caller holds the lease)."""
    batch = ledger.batch_id([f.sha256 for f in files])
    progress = Progress(len(files), progress_stream, show_progress)
    if isinstance(chosen, DeltaRsEngine):
        from otel_delta.backfill.local import run_local

        loaded = run_local(files, fmt, chosen, batch, progress)
    else:
        from otel_delta.backfill.distributed import run_spark

        try:
            loaded = run_spark(files, fmt, engines.spark, batch, progress)
        except OtelDeltaError:
            raise
        except Exception as exc:  # Py4J/JVM errors: one line for the user, details in the log
            log.debug("backfill on Spark failed", exc_info=True)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BackfillError(
                f"backfill on Spark (master {settings.spark.master}) failed: {first}"
            ) from exc
    progress.update(len(files), loaded.total_rows, final=True)
    # the rows are committed: if the store fails here, a re-run records the files, adding none
    with store_errors_named(ledger.LEDGER_TABLE, lakehouse.uri(ledger.LEDGER_TABLE)):
        recorded = ledger.append_once(
            lakehouse.root,
            ledger.LEDGER_TABLE,
            ledger.ledger_rows(loaded.files, batch),
            ledger.app_id(batch),
            lakehouse.storage,
        )
    if loaded.files and not recorded:
        # another run of the same files at once recorded them: the same batch, the same txn
        # ids, so each table committed their rows once, whichever run got there first. That
        # run counts them loaded; here they are already loaded, as a re-run counts them, or
        # an operator adding up both runs' summaries counts every file twice.
        return BackfillReport.of(
            chosen.name, loaded.recorded_elsewhere(), skipped + len(loaded.files)
        )
    return BackfillReport.of(chosen.name, loaded, skipped)


def summary(report: BackfillReport, table_root: str) -> str:
    """What the CLI prints: rows per table, then the counts."""
    lines = [f"{name:<32} {rows:>12,}" for name, rows in report.rows.items()]
    lines.append(
        f"{report.files_new} file(s) loaded with {report.engine}, {report.files_skipped} already "
        "loaded"
        + (
            f", {report.files_not_loaded} not loaded (nothing could be decoded)"
            if report.files_not_loaded
            else ""
        )
        + f"; {report.records:,} records, {report.rejected:,} item(s) rejected, "
        f"{report.dead_letters:,} dead letter(s)"
        + (
            f" (in {table_root.rstrip('/')}/{ledger.DEAD_LETTER_TABLE})"
            if report.dead_letters
            else ""
        )
    )
    return "\n".join(lines)
