"""`otel-delta backfill`: plan (hash, skip what was loaded), convert + commit, record the files."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from otel_delta.backfill import batches, ledger
from otel_delta.backfill.files import Format
from otel_delta.backfill.plan import Loaded, PlannedFile, not_loaded, plan
from otel_delta.backfill.progress import Progress
from otel_delta.config import Settings
from otel_delta.engines import DeltaRsEngine, Engine, EngineName, Engines
from otel_delta.errors import BackfillError, OtelDeltaError, store_errors_named
from otel_delta.faults import crash_point, pause_point
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
    files_held_back: int = 0  # a stopped load's, which cannot be finished yet (batches.py)

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

    def plus(self, other: BackfillReport) -> BackfillReport:
        """The counts of two loads of one run (a stopped load finished first, then its own)."""
        rows = dict(self.rows)
        for name, count in other.rows.items():
            rows[name] = rows.get(name, 0) + count
        return BackfillReport(
            self.engine,
            self.files_new + other.files_new,
            self.files_skipped + other.files_skipped,
            dict(sorted(rows.items())),
            self.records + other.records,
            self.rejected + other.rejected,
            self.dead_letters + other.dead_letters,
            self.skipped_commits + other.skipped_commits,
            self.files_not_loaded + other.files_not_loaded,
            self.files_held_back + other.files_held_back,
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
        loaded_before = ledger.recorded(lakehouse.root, lakehouse.storage).hashes
    except OSError as exc:  # delta-rs: the store down, refusing the keys, no such bucket
        raise lakehouse.unusable(exc) from None
    # hashed before taking turns (runs at once read their files at once); a re-run with
    # nothing new takes no lease, nor waits for another run
    files, skipped = plan(paths, loaded_before)
    with store_errors_named(batches.BATCHES_TABLE, lakehouse.uri(batches.BATCHES_TABLE)):
        if not files and not batches.any_unfinished(lakehouse.root, lakehouse.storage):
            return BackfillReport(chosen.name, 0, skipped)
    say = _say_to(progress_stream)

    def load(
        files: list[PlannedFile], fmt: Format, stopped: list[str] | None = None
    ) -> BackfillReport:
        return _load(
            settings,
            lakehouse,
            engines,
            chosen,
            files,
            fmt,
            progress_stream,
            show_progress,
            stopped or [],
        )

    with ledger.one_run_at_a_time(lakehouse.root, say, lakehouse.storage):
        # one run at a time plans on the ledger, loads and records: the files another run
        # recorded while this one waited are skipped (two runs at once over a+b and b+c have
        # different batches, so the txn ids cannot stop both from committing b)
        with store_errors_named(ledger.LEDGER_TABLE, lakehouse.uri(ledger.LEDGER_TABLE)):
            recorded = ledger.recorded(lakehouse.root, lakehouse.storage)
        files, recorded_since = not_loaded(files, recorded.hashes)
        report = BackfillReport(chosen.name, 0, skipped + recorded_since)
        # a load a crash stopped after some of its table commits is finished first, as the
        # same batch, or its files are held back: in this run's batch they would be stored
        # twice (batches.py)
        resumes, held_back = batches.to_finish(lakehouse, files, recorded.batches, say)
        for resume in resumes:
            say(
                f"otel-delta: finishing an earlier backfill of {len(resume.files)} file(s) that "
                "stopped after some of its table commits"
            )
            report = report.plus(load(resume.files, resume.fmt, resume.attempts))
        finishing = held_back.union(*({f.sha256 for f in r.files} for r in resumes))
        report.files_held_back = len([f for f in files if f.sha256 in held_back])
        files = [f for f in files if f.sha256 not in finishing]
        if not files:
            return report
        pause_point("backfill-planned")
        return report.plus(load(files, fmt))


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
    fmt: Format,
    progress_stream: TextIO | None,
    show_progress: bool,
    stopped: list[str],
) -> BackfillReport:
    """Convert and commit the planned files, then record them (the caller holds the lease).
    `stopped`: the attempts of earlier loads of these files that this one finishes."""
    batch = ledger.batch_id([f.sha256 for f in files])
    with store_errors_named(batches.BATCHES_TABLE, lakehouse.uri(batches.BATCHES_TABLE)):
        attempt = batches.start(lakehouse.root, batch, files, fmt, lakehouse.storage)
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
    crash_point("backfill-committed")
    # the rows are committed: if the store fails here, the next run records the files, adding
    # none, whatever files it is given (batches.py)
    with store_errors_named(ledger.LEDGER_TABLE, lakehouse.uri(ledger.LEDGER_TABLE)):
        recorded = ledger.append_once(
            lakehouse.root,
            ledger.LEDGER_TABLE,
            ledger.ledger_rows(loaded.files, batch),
            ledger.app_id(batch),
            lakehouse.storage,
        )
    with store_errors_named(batches.BATCHES_TABLE, lakehouse.uri(batches.BATCHES_TABLE)):
        batches.finish(lakehouse.root, batch, [*stopped, attempt], lakehouse.storage)
    if loaded.files and not recorded:
        # another run of the same files at once recorded them: the same batch, the same txn
        # ids, so each table committed their rows once, whichever run got there first. That
        # run counts them loaded; here they are already loaded, as a re-run counts them, or
        # an operator adding up both runs' summaries counts every file twice.
        return BackfillReport.of(chosen.name, loaded.recorded_elsewhere(), len(loaded.files))
    return BackfillReport.of(chosen.name, loaded, 0)


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
        + (
            f", {report.files_held_back} held back (an earlier backfill's, above)"
            if report.files_held_back
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
