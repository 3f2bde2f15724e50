"""The background maintainer: a thread that runs a maintenance round over every table.

A thread (not the event loop) because delta-rs calls block; they release the GIL, so ingestion
keeps its pace. Tables are opened through the connector API, with the server's settings (and
engine: `[deltalake.operations] engine`).
The first round runs one interval after start, then every interval; `stop` lets the round in
progress finish (each step is bounded by the table's size).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from otel_delta.config import Settings
from otel_delta.connector import DeltaLakeConnector
from otel_delta.engines.commit_log import LogFiles
from otel_delta.engines.lease import LEASES
from otel_delta.errors import StoreUnavailableError, TableNotFoundError, describe
from otel_delta.maintenance.tasks import TablePolicy, TableReport, maintain_table
from otel_delta.metrics import MAINTENANCE_RUNS
from otel_delta.tables import TABLES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenancePolicy:
    interval_seconds: float
    table: TablePolicy
    settings: Settings
    tables: tuple[str, ...] = tuple(TABLES)


@dataclass
class TableTotals:
    """Work done on one table since start."""

    rounds: int = 0
    files_compacted: int = 0
    files_vacuumed: int = 0
    expired_rows_deleted: int = 0
    errors: int = 0


@dataclass
class RoundReport:
    round: int
    tables: list[TableReport]

    @property
    def errors(self) -> list[str]:
        return [f"{t.table}: {e}" for t in self.tables for e in t.errors]


class Maintainer:
    def __init__(self, policy: MaintenancePolicy) -> None:
        self.policy = policy
        self.rounds: list[RoundReport] = []  # the latest few, for tests and diagnostics
        self.rounds_run = 0
        self.totals: dict[str, TableTotals] = {}
        self._checkpointed: dict[str, int] = {}
        # each table's Delta log as the last cleanup left it (the bridge's /metrics)
        self.logs: dict[str, LogFiles] = {}
        self.connector = DeltaLakeConnector(policy.settings)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="maintainer", daemon=True)
        self._thread.start()
        log.info("table maintenance every %ss", self.policy.interval_seconds)

    def stop(self, timeout: float | None = None) -> None:
        """Stop scheduling rounds, wait for the one in progress, then release the tables'
        maintenance leases, so another replica maintains them at its next round rather than
        once they run out (engines/lease.py)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return  # a rewrite still runs: its lease must outlive it
        self.release_leases()

    def release_leases(self) -> None:
        if not LEASES.held():
            return
        for name in self.policy.tables:
            try:
                # nothing if not held
                LEASES.release(self.connector.lakehouse.open_table(name))
            except TableNotFoundError:
                continue
            except Exception as exc:  # it runs out by itself
                log.warning("releasing the maintenance lease of %s: %s", name, describe(exc))

    def _loop(self) -> None:
        while not self._stop.wait(self.policy.interval_seconds):
            try:
                self.run_round()
            except Exception:  # never let the thread die: the next round retries
                log.exception("maintenance round failed")

    def run_round(self) -> RoundReport:
        """Maintain every table once (also callable directly, e.g. from a CLI or a test)."""
        self.rounds_run += 1
        reports = []
        for name in self.policy.tables:
            if self._stop.is_set() and self._thread is not None:
                break
            try:
                table = self.connector.table(name)
            except TableNotFoundError:
                continue  # not written yet
            except StoreUnavailableError as exc:
                self._store_failed(name, exc, reports)
                if self.connector.lakehouse.is_local:
                    continue  # one directory's fault (its permissions, say): not the others'
                break  # every other table is on the same store, with the same keys
            report = maintain_table(
                table,
                self.policy.table,
                checkpointed_version=self._checkpointed.get(name),
            )
            totals = self.totals.setdefault(name, TableTotals())
            totals.rounds += 1
            totals.files_compacted += report.files_compacted + report.open_files_compacted
            totals.files_vacuumed += report.files_vacuumed
            totals.expired_rows_deleted += report.expired_rows_deleted
            totals.errors += len(report.errors)
            if report.checkpointed:
                self._checkpointed[name] = report.version
            if report.log is not None:
                self.logs[name] = report.log
            if report.open_files_compacted:
                log.info(
                    "maintained %s: %d of today's files clustered into %d",
                    name,
                    report.open_files_compacted,
                    report.open_files_written,
                )
            if report.files_compacted or report.files_vacuumed or report.expired_rows_deleted:
                log.info(
                    "maintained %s: %d files compacted into %d, %d vacuumed, %d expired rows",
                    name,
                    report.files_compacted,
                    report.files_written,
                    report.files_vacuumed,
                    report.expired_rows_deleted,
                )
            reports.append(report)
        result = RoundReport(self.rounds_run, reports)
        self.rounds = [*self.rounds[-9:], result]
        return result

    def _store_failed(
        self, name: str, error: StoreUnavailableError, reports: list[TableReport]
    ) -> None:
        """The store is down or refuses our keys: one warning line for the round (the error
        names the table and the cause), like a failed step, and the next round tries again;
        not the round's traceback, with delta-rs's colour codes, nor a line per table."""
        MAINTENANCE_RUNS.labels("open", "failed").inc()
        self.totals.setdefault(name, TableTotals()).errors += 1
        reports.append(TableReport(name, errors=[f"open: {error}"]))
        log.warning("maintenance round stopped: %s", error)
