"""The one interface both Delta engines implement, and the names that choose one.

An engine commits to the telemetry tables of one `Lakehouse`: appends (the bridge's and the
connector's inserts), merge, delete, optimize, vacuum and restore. Conditions reach it already
rendered as SQL in its own `dialect` by the connector's predicate module, so engines never parse.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, Protocol

import pyarrow as pa
from deltalake import Transaction

from otel_delta.errors import ConfigError, RowsRejectedError
from otel_delta.sql import Dialect

# what `[deltalake.operations] engine` and every `engine=` argument accept
EngineName = Literal["auto", "delta-rs", "spark"]
ENGINES: tuple[str, ...] = ("auto", "delta-rs", "spark")


# how the engines say that rows, not the storage or the moment, made a commit fail: delta-rs
# (constraint and invariant checks, Arrow casts) and delta-spark (its exception class names)
REJECTED_ROWS_MARKERS = (
    "Invalid data found",
    "failed validation check",
    "DeltaInvariantViolationException",
    "DELTA_VIOLATE_CONSTRAINT",
    "CHECK constraint",
    "NOT NULL constraint",
)


# how the engines say a merge's source held two rows for one target row (dedupe off)
DUPLICATE_SOURCE_MARKERS = (
    "multiple source rows",  # delta-rs
    "MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW",  # delta-spark
)


def _says(error: BaseException, markers: tuple[str, ...]) -> bool:
    """Does an engine's error (its class name or message) hold one of `markers`?"""
    text = f"{type(error).__name__}: {error}"
    return any(marker in text for marker in markers)


# how delta-rs says the table's protocol asks its writers for a feature it cannot write (e.g.
# in-commit timestamps, which a Spark user can turn on with SET TBLPROPERTIES): no attempt of
# the same commit can succeed until the feature is dropped from the table
UNWRITABLE_FEATURE_MARKERS = ("Unsupported table features required",)


def unwritable_features(error: BaseException) -> bool:
    """Does the table ask for a writer feature this engine cannot write?"""
    return _says(error, UNWRITABLE_FEATURE_MARKERS)


def duplicate_source_rows(error: BaseException) -> bool:
    """Did a merge fail because several source rows matched one target row?"""
    return _says(error, DUPLICATE_SOURCE_MARKERS)


def rows_rejected(error: BaseException) -> bool:
    """Did the table refuse the rows themselves (so the same commit can never succeed)?"""
    return isinstance(error, RowsRejectedError) or _says(error, REJECTED_ROWS_MARKERS)


def check_engine(name: str) -> EngineName:
    if name not in ENGINES:
        raise ConfigError(f"engine must be one of {list(ENGINES)}, got {name!r}")
    return name  # type: ignore[return-value]


class TableWriter(Protocol):
    """What the group-commit buffer needs: one Delta commit per call."""

    def append(
        self, table_name: str, data: pa.Table, app_transaction: Transaction | None = None
    ) -> int:
        """Commit `data` to the table as one Delta transaction; return the table's version.

        With `app_transaction` (a Delta `txn` app id + version) the commit records it, and a
        call whose transaction the table already holds (at that version or later) commits
        nothing: retries and replays are exactly-once.
        Must be safe to call from several threads for *different* tables at once.
        Raises CommitError if the commit did not happen.
        """
        ...

    def spread(self, wide: bool) -> None:
        """Whether the next commits may spread their work over every core. The buffer turns it
        on while its commits are what everything else waits for: requests waiting for the
        memory that only a commit frees, or the bridge shutting down. Off, a commit keeps to
        its thread, which costs less CPU per item (docs/performance.md)."""
        ...

    def yield_while(self, condition: Callable[[], bool]) -> None:
        """Encode each file of a commit that keeps to its thread below the threads answering
        Exports (priority.py) while `condition()` holds as the file begins. The buffer gives
        it once: while it has room to spare, nothing waits for its commits."""
        ...


class Engine(TableWriter, Protocol):
    """Each operation commits tagged with the caller's `commit_id`, in the commitInfo field
    `commit_id_key`: the caller then reads the version of the operation's own commit from the
    log (engines/commit_log.own_commit), as appends find theirs. Neither engine's API returns
    that version, and the table's latest version after the operation may be another writer's
    (the bridge appends all the time). An operation that commits more than once tags each
    commit; one that finds nothing to do may commit nothing."""

    name: Literal["delta-rs", "spark"]
    dialect: Dialect  # the SQL dialect its conditions are written in
    commit_id_key: str  # the commitInfo field its operations' commits carry `commit_id` in

    def conflicts(self) -> tuple[type[BaseException], ...]:
        """The exceptions that mean "lost a race with another writer": worth a retry."""
        ...

    def merge(
        self, table_name: str, source: pa.Table, condition: str, commit_id: str
    ) -> tuple[int, int]:
        """MERGE source AS s INTO table AS t ON condition: update all matched, insert the rest;
        returns (inserted, updated)."""
        ...

    def delete(self, table_name: str, condition: str, commit_id: str) -> int:
        """Delete the rows matching `condition`; returns how many."""
        ...

    def optimize(
        self,
        table_name: str,
        where: str | None,
        partition_filters: list[tuple[str, str, Any]] | None,
        z_order: list[str],
        target_size: int,
        commit_id: str,
    ) -> dict[str, Any]:
        """Compact (or Z-order) files of the partitions selected by `where` (SQL in this
        engine's dialect; delta-rs takes the same selection as `partition_filters`). Returns
        the engine's metrics."""
        ...

    def vacuum(self, table_name: str, retention_hours: int, dry_run: bool) -> list[str]:
        """Delete (or list) unreferenced files older than the retention; returns the paths of
        those that existed and were deleted (or would be), never of files already gone."""
        ...

    def restore(self, table_name: str, target: int | datetime, commit_id: str) -> tuple[int, int]:
        """Make an earlier version current (a new commit); returns (files added, removed)."""
        ...
