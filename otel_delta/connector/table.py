"""`Table`: one telemetry table and every operation on it, on delta-rs or Spark."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, write_deltalake
from deltalake import Field as DeltaField
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFound

from otel_delta.connector import audit, erasure, maintenance, redaction
from otel_delta.connector import upsert as upsert_ops
from otel_delta.connector.operation_metrics import OperationMetrics, OperationStats, measured
from otel_delta.connector.predicates import (
    Column,
    Compare,
    Predicate,
    Value,
    conjunction,
    parse_predicate,
    sql_literal,
)
from otel_delta.connector.pruning import file_stats
from otel_delta.connector.query import INT64_MAX, Query, parse_timestamp, whole_number
from otel_delta.connector.results import (
    DeleteResult,
    HistoryEntry,
    InsertResult,
    OptimizeResult,
    RedactResult,
    RestoreResult,
    SchemaChange,
    TableMetadata,
    TableStatistics,
    UpsertResult,
    VacuumResult,
)
from otel_delta.engines import Engine, EngineName, commit_log
from otel_delta.engines.base import duplicate_source_rows
from otel_delta.engines.checkpoint_thinning import log_retention_seconds, thin_checkpoints
from otel_delta.engines.data_files import table_filesystem
from otel_delta.engines.lease import LEASES
from otel_delta.errors import (
    CommitError,
    ConcurrentModificationError,
    InvalidPredicateError,
    InvalidQueryError,
    OperationDisabledError,
    SchemaMismatchError,
    StoreUnavailableError,
    TableNotFoundError,
    VersionNotFoundError,
    describe,
)
from otel_delta.faults import pause_point
from otel_delta.lakehouse import CHANGE_DATA_FEED, METRICS_PREFIX
from otel_delta.privacy import keyed_hash
from otel_delta.retry import retrying
from otel_delta.tables import TABLES, versions
from otel_delta.tables.versions import SCHEMA_VERSION_PROPERTY

if TYPE_CHECKING:
    from otel_delta.config import DeltaLakeSettings
    from otel_delta.connector.connector import DeltaLakeConnector

T = TypeVar("T")
log = logging.getLogger(__name__)

# the metrics of an optimize with nothing to rewrite, as both engines name them in theirs
NOTHING_OPTIMIZED: dict[str, Any] = {
    "numFilesAdded": 0,
    "numFilesRemoved": 0,
    "partitionsOptimized": 0,
    "numBatches": 0,
}

# Records accepted by upsert/bulk_insert: dicts, Arrow, or OTLP Export*ServiceRequest(s).
Records = Any


class Table:
    """A handle on one telemetry table; get it from `DeltaLakeConnector.table(name)`."""

    def __init__(self, connector: DeltaLakeConnector, name: str, delta: DeltaTable) -> None:
        self.connector = connector
        self.name = name
        self.spec = TABLES[name]
        self._delta = delta

    def __repr__(self) -> str:
        return f"Table({self.name!r}, uri={self.uri!r})"

    @property
    def uri(self) -> str:
        return self.connector.uri(self.name)

    @property
    def _settings(self) -> DeltaLakeSettings:
        return self.connector.config.deltalake

    def delta(self, version: int | None = None) -> DeltaTable:
        """A fresh delta-rs handle on the latest (or the given) version. Every operation
        starts from one, so a store that went down after the table was opened is named here,
        as `DeltaLakeConnector.table` names it: StoreUnavailableError, not delta-rs's OSError
        ("Kernel error -> Generic S3 error")."""
        try:
            handle = DeltaTable(self.uri, storage_options=self.connector.storage_options)
        except DeltaTableNotFound:
            raise TableNotFoundError(self.name, self.uri) from None
        except OSError as exc:
            raise StoreUnavailableError(self.name, self.uri, describe(exc)) from None
        if version is not None:
            try:
                handle.load_as_version(version)
            except (DeltaError, OSError, ValueError) as exc:  # incl. its log entry purged
                raise VersionNotFoundError(self.name, str(version)) from exc
        self._delta = handle
        return handle

    def delta_as_of(self, timestamp: datetime | str) -> DeltaTable:
        """A delta-rs handle on the latest version committed at or before `timestamp`.

        Resolved from the commits' own timestamps made monotonic (`monotonic_times`: what
        `history` shows, in milliseconds), not by delta-rs from the log objects' modification
        times: object stores keep those in whole seconds, so two commits of one second were
        indistinguishable on S3 (an `as_of` or a restore by time landed on the later one)."""
        moment = parse_timestamp(timestamp)
        version = self._version_at(moment.timestamp() * 1000)
        if version is None:
            raise VersionNotFoundError(self.name, f"at or before {moment.isoformat()}")
        return self.delta(version)

    @property
    def schema(self) -> pa.Schema:
        """The table's current Arrow schema (including evolved columns)."""
        return pa.schema(self.delta().schema().to_arrow())

    def version(self) -> int:
        return self.delta().version()

    def predicate(self, where: str) -> Predicate:
        """Parse and validate `where` against this table's schema."""
        return parse_predicate(where, self.schema)

    def _engine(self, engine: EngineName | None, rows: int | None = None) -> Engine:
        """The engine of one call: `engine=` or the connector's, and the size of the write."""
        return self.connector.engines.pick(rows, engine)

    def _allowed(self, operation: str) -> None:
        if not getattr(self._settings.operations, f"{operation}_enabled"):
            raise OperationDisabledError(
                f"{operation} is disabled (deltalake.operations.{operation}_enabled = false)"
            )

    def _retrying(self, what: str, engine: Engine, run: Callable[[], T]) -> T:
        """Run an operation; if its commit lost a race that the engine's own commit retries
        could not settle, run it again on the new state; finally ConcurrentModificationError.

        `max_commit_retries` is the one budget for lost races: delta-rs spends it rebasing a
        commit, and every 5 of it buy one re-run of the whole operation here.
        """
        return retrying(
            run,
            attempts=self._settings.operations.max_commit_retries // 5 + 1,
            retry_on=engine.conflicts(),
            what=f"{what} on {self.name}",
            give_up=self._conflict,
        )

    def _committing(
        self, what: str, engine: Engine, run: Callable[[str], T], *, found: int | None = None
    ) -> tuple[T, int]:
        """Run an operation as `_retrying` does, `run` given the commit id to tag its commits
        with (Engine); returns its outcome and the version of its own commit, read from the log
        by that id (engines/commit_log.own_commit), as appends find theirs.

        Not the table's latest version afterwards: the bridge's appends land all the time, and
        a Spark OPTIMIZE reported the version of the second append after it, so an undo by
        `restore(version=result.version - 1)` went back to the wrong state. An operation that
        commits more than once (an OPTIMIZE in batches) reports its last commit; one that
        committed nothing (a delete matching no row), the version the table was at before it
        ran, as every other no-op result does: `found`, when the caller committed something
        else first (optimize: the maintenance lease, no change of the table's rows).
        """
        before = self.version()
        commit_id = uuid.uuid4().hex
        outcome = self._retrying(what, engine, lambda: run(commit_id))
        own = commit_log.own_commit(
            self._files(), before, engine.commit_id_key, commit_id, last=True
        )
        if own is not None:
            return outcome, own
        return outcome, before if found is None else found

    def _conflict(self, exc: BaseException, attempts: int) -> ConcurrentModificationError:
        return ConcurrentModificationError(
            self.name, self._safe_version(), attempts, str(exc).splitlines()[0]
        )

    def _safe_version(self) -> int | None:
        try:
            return self.delta().version()
        except Exception:  # the error being reported matters more
            return None

    def _metrics_scope(self) -> tuple[OperationMetrics, str]:
        return self.connector.operations, self.name

    def operation_metrics(self) -> dict[str, OperationStats]:
        """Per operation on this table in this process: count, errors, rows, p50/p99 latency
        and the last error (see otel_delta.connector.operation_metrics)."""
        return self.connector.operations.snapshot(self.name)

    def partition(self, partition_path: str, *, existing: bool = True) -> Predicate:
        """`service_name=web/date=2026-11-20` as a condition on the partition columns, checked
        against the table's partitioning: a column that is not a partition column is an
        InvalidPredicateError, a value the table has no partition for a PartitionNotFoundError
        (unless not `existing`: a bulk insert may open a partition)."""
        columns = self.delta().metadata().partition_columns
        segments = [s for s in partition_path.strip("/").split("/") if s]
        if not segments:
            raise InvalidPredicateError("partition_path is empty", partition_path)
        conditions = []
        for segment in segments:
            name, equals, value = segment.partition("=")
            if not equals or name not in columns:
                raise InvalidPredicateError(
                    f"partition_path: {segment!r} is not <partition column>=<value>; the "
                    f"partition columns are {columns}",
                    partition_path,
                    name or None,
                )
            conditions.append(f"{name} = {sql_literal(unquote(value), 'datafusion')}")
        predicate = parse_predicate(" AND ".join(conditions), self.schema)
        if existing:
            maintenance.check_partitions_exist(self.name, predicate, self.delta())
        return predicate

    @staticmethod
    def _check_in_partition(data: pa.Table, scope: Predicate, partition_path: str) -> None:
        """InvalidQueryError unless every record belongs to the partition `scope`."""
        outside = data.num_rows - data.filter(scope.to_arrow()).num_rows
        if outside:
            raise InvalidQueryError(
                f"{outside} of {data.num_rows} record(s) are not in partition {partition_path}"
            )

    # --- writes ----------------------------------------------------------------------------

    def _records(self, records: Records) -> tuple[pa.Table, list[pa.Field]]:
        """The records in the table's schema plus the columns they would add to it, and those
        columns: added by `_conformed` once the operation's own checks have passed, so a
        refused call leaves the table's schema as it was. A table of a newer schema version
        takes none (CommitError), as the engines' appends refuse it."""
        delta = self.delta()
        self.connector.lakehouse.check_schema_version(self.name, delta)
        schema = pa.schema(delta.schema().to_arrow())
        data = upsert_ops.to_arrow(records, self.name, schema)
        new = [data.schema.field(n) for n in data.column_names if n not in schema.names]
        if new and not self._settings.schema_.auto_evolution:
            raise SchemaMismatchError(
                f"records have new column(s) {[f.name for f in new]} and "
                "deltalake.schema.auto_evolution is off",
                expected=str(schema.names),
                actual=str(data.column_names),
            )
        target = pa.schema([*schema, *new])
        # a table of an older schema version: its retired columns computed (tables/versions.py)
        data = upsert_ops.conform(versions.conform(self.name, target, data), target)
        return upsert_ops.complete(self.name, data), new

    def _record_changes(self) -> None:
        """With `[deltalake.table] change_data_feed = true`, turn the feed on for a table that
        does not have it yet, as the bridge's writer does when it opens one, so this write's
        changes are recorded: an upsert or delete on a table the bridge had not opened since
        the setting went on recorded nothing, and `changes()` then told the user to set what
        they had set."""
        lakehouse = self.connector.lakehouse
        if not lakehouse.change_data_feed:
            return  # no table open for a setting that is off (each open lists the log)
        if self.delta().metadata().configuration.get(CHANGE_DATA_FEED) != "true":
            lakehouse.create_table(self.name)
            self.connector.forget_writer_handle(self.name)

    def _conformed(self, data: pa.Table, new: list[pa.Field]) -> pa.Table:
        """`data` in the table's schema, once its `new` columns are added (schema evolution)."""
        if not new:
            return data
        self.update_schema(new)
        return upsert_ops.conform(data, self.schema)

    @measured("upsert")
    def upsert(
        self,
        records: Records,
        merge_key: Sequence[str] | None = None,
        dedupe: bool = True,
        *,
        partition_path: str | None = None,
        engine: EngineName | None = None,
    ) -> UpsertResult:
        """Merge records on `merge_key`: matching rows are replaced, new ones inserted.

        Default keys: spans (trace_id, span_id); logs (time_unix_nano, observed_time_unix_nano,
        trace_id, span_id, body) — both plus the partition columns, which are derived from the
        row and let the merge skip every other partition. Metric tables need a merge_key.
        With dedupe, rows sharing a key inside the batch collapse to the last one; without it,
        such duplicates are an error of the engine when they match an existing row.
        With `partition_path` ("service_name=web/date=2026-11-20") every record must belong to
        that partition, and the merge reads and rewrites files of that partition only.
        """
        self._allowed("upsert")
        scope = self.partition(partition_path) if partition_path is not None else None
        data, new = self._records(records)
        partitions = self.delta().metadata().partition_columns
        keys = upsert_ops.merge_keys(self.name, data.schema, merge_key, partitions)
        if scope is not None:
            self._check_in_partition(data, scope, partition_path)
        upsert_ops.check_keyed(data, keys)  # before a new key column is added to the table
        data = self._conformed(data, new)
        self._record_changes()
        dropped = 0
        if dedupe:
            data, dropped = upsert_ops.dedupe(data, keys)
        chosen = self._engine(engine, data.num_rows)
        if data.num_rows == 0:
            return UpsertResult(0, 0, dropped, self.version(), chosen.name)
        condition = upsert_ops.merge_condition(keys, data, chosen.dialect, partitions)
        try:
            (inserted, updated), version = self._committing(
                "upsert",
                chosen,
                lambda commit_id: chosen.merge(self.name, data, condition, commit_id),
            )
        except Exception as exc:
            if not duplicate_source_rows(exc):
                raise
            raise InvalidQueryError(
                f"several records share a merge key {list(keys)} with one row of the table; "
                "upsert with dedupe=True keeps the last of them"
            ) from exc
        return UpsertResult(inserted, updated, dropped, version, chosen.name)

    @measured("insert")
    def bulk_insert(
        self,
        records: Records,
        *,
        partition_path: str | None = None,
        engine: EngineName | None = None,
    ) -> InsertResult:
        """Append records as one commit (no key check), exactly as the bridge does.

        With `partition_path` ("service_name=web/date=2026-11-20", as the connector TOML's
        bulk insert takes it) every record must belong to that partition, which may be new;
        otherwise nothing is written (InvalidQueryError)."""
        self._allowed("bulk_insert")
        scope = (
            self.partition(partition_path, existing=False) if partition_path is not None else None
        )
        data, new = self._records(records)
        if scope is not None:
            self._check_in_partition(data, scope, partition_path)
        data = self._conformed(data, new)
        self._record_changes()
        chosen = self._engine(engine, data.num_rows)
        if data.num_rows == 0:
            return InsertResult(0, self.version(), chosen.name)
        try:  # the engine's append retries on its own; not again here
            version = chosen.append(self.name, data)
        except CommitError as exc:
            if isinstance(exc.__cause__, chosen.conflicts()):
                raise self._conflict(exc.__cause__, 1) from exc
            raise
        return InsertResult(data.num_rows, version, chosen.name)

    @measured("delete")
    def delete(
        self,
        where: str | None = None,
        *,
        partition_path: str | None = None,
        hard: bool = False,
        actor: str | None = None,
        engine: EngineName | None = None,
    ) -> DeleteResult:
        """Delete the rows matching the validated condition (and in `partition_path`, if
        given: then only that partition's files are read and rewritten); returns how many.

        Soft (the default): the rows leave the current version and stay readable by time
        travel and `restore` until a vacuum past the retention period. Hard (`hard=True`):
        then every file that held them, every log entry before, and the change data feed
        are physically removed at once (otel_delta.connector.erasure), so no version can
        return them; time travel to an earlier version fails from then on. A hard delete
        needs the `[privacy]` hash key and appends a record to the `_audit` table (who:
        `actor`), with the condition's values as keyed hashes.
        """
        self._allowed("delete")
        if where is None and partition_path is None:
            raise InvalidQueryError("delete needs a condition (where) or a partition_path")
        parts = [self.partition(partition_path)] if partition_path is not None else []
        if where is not None:
            parts.append(self.predicate(where))
        predicate = conjunction(parts)
        assert predicate is not None
        if not hard:
            self._record_changes()
            return self._delete(predicate, engine)
        return self._hard_delete(predicate, actor, engine)

    def _hard_delete(
        self, predicate: Predicate, actor: str | None, engine: EngineName | None
    ) -> DeleteResult:
        hashed = self._keyed_hash()  # before anything is deleted
        erasure.check_purgeable(self.connector.lakehouse, self.name, self.delta())
        before = self.version()
        # a hard delete that matches no row still purges what older versions kept
        with self._erasing(
            "hard_delete", predicate.with_hashed_literals(hashed), before, actor, always=True
        ) as done:
            deleted = self._delete(predicate, engine)
            done.rows, done.committed = deleted.deleted, deleted.deleted > 0
        purged = done.purged
        assert purged is not None
        return DeleteResult(
            deleted.deleted,
            purged.version,
            deleted.engine,
            hard=True,
            files_purged=purged.files_purged,
            log_entries_removed=purged.log_entries_removed,
        )

    def _keyed_hash(self) -> Callable[[str], str]:
        """The keyed hash under the `[privacy]` key (ConfigError when the key is unset)."""
        key = self.connector.config.privacy.resolved_key()
        return lambda text: keyed_hash(text, key)

    @contextmanager
    def _erasing(
        self, operation: str, predicate: str, before: int, actor: str | None, *, always: bool
    ) -> Iterator[_Erasure]:
        """Around the rewrite of a hard delete or a redaction (the body of the `with`, which
        counts its rows in the `_Erasure` and sets `committed` once a commit of it is in the
        table): then purge (when it committed, or `always`) and audit it (`predicate` already
        hashed); the result in `purged`.

        What the body has marked committed is purged and audited even when the rewrite fails
        later (an error in a later partition, the store going away, Ctrl-C): the values it
        replaced would otherwise stay in the old files and in earlier versions with no record
        of the operation, and a re-run, finding those rows already rewritten, would purge
        nothing.
        The record then says the operation is incomplete (the error's type, never its text,
        which may quote a value), and the error is raised after it. A failure before anything
        was marked committed is raised as it is, with no purge or record: also one between a
        partition's commit and its return (Ctrl-C there), which a hard delete of the same
        condition then purges."""
        done = _Erasure(operation, predicate, before, actor)
        failure: BaseException | None = None
        try:
            yield done
        except BaseException as exc:
            if not done.committed:
                raise
            failure = exc
        note = f" [incomplete: {type(failure).__name__}]" if failure is not None else ""
        try:
            done.purged = self._purge_and_audit(done, note, done.committed or always)
        except Exception as exc:
            if failure is None:
                raise
            raise exc from failure
        if failure is not None:
            raise failure

    def _purge_and_audit(self, done: _Erasure, note: str, purge: bool) -> erasure.Purge:
        """Purge what no version may return, then record the operation in `_audit`, its
        predicate followed by `note`. Without `purge` (a redaction that changed nothing) only
        the record is written, saying so: nothing removed, the version unchanged. A purge that
        fails is recorded too (`[purge failed]`), before its error goes on: the rows are out
        of the current version, but earlier versions still hold them until a purge completes
        (a hard delete purges even when it matches no row, so running it again finishes the
        job)."""
        purged = None
        try:
            if purge:
                try:
                    purged = erasure.purge(self.connector.lakehouse, self.name)
                except OSError as exc:  # the store refused a deletion, or went away
                    raise StoreUnavailableError(self.name, self.uri, describe(exc)) from None
                self.connector.forget_writer_handle(self.name)  # its snapshot's log is gone
        except BaseException:
            self._audit(done, f"{note} [purge failed]", None)
            raise
        return self._audit(done, note, purged)

    def _audit(self, done: _Erasure, note: str, purged: erasure.Purge | None) -> erasure.Purge:
        if purged is None:  # nothing removed: the version as it is
            purged = erasure.Purge(files_purged=0, log_entries_removed=0, version=self.version())
        audit.append(
            self.connector.lakehouse,
            audit.AuditRecord(
                actor=done.actor or "",
                operation=done.operation,
                table_name=self.name,
                predicate=done.predicate + note,
                rows_affected=done.rows,
                files_purged=purged.files_purged,
                log_entries_removed=purged.log_entries_removed,
                version_before=done.before,
                version_after=purged.version,
            ),
        )
        return purged

    def expire(self, before: date, *, engine: EngineName | None = None) -> DeleteResult:
        """Retention: delete every row dated before `before`. Governed by
        `deltalake.table.retention_days` (scheduled maintenance calls it), not by
        `operations.delete_enabled`, which gates user deletes. On a table partitioned by date
        whole files go and none is rewritten."""
        if not isinstance(before, date) or isinstance(before, datetime):
            raise InvalidQueryError(f"expire: before must be a datetime.date, got {before!r}")
        return self._delete(self.predicate(f"date < '{before.isoformat()}'"), engine)

    def _delete(self, predicate: Predicate, engine: EngineName | None) -> DeleteResult:
        chosen = self._engine(engine)
        if chosen.dialect == "datafusion" and predicate.nested_null_tests:
            names = ", ".join(predicate.nested_null_tests)
            raise InvalidPredicateError(
                f"delta-rs cannot delete by IS [NOT] NULL on {names} (not a plain column); "
                "query by it, or delete with engine='spark'",
                predicate.text,
            )
        condition = predicate.to_sql(chosen.dialect)
        deleted, version = self._committing(
            "delete", chosen, lambda commit_id: chosen.delete(self.name, condition, commit_id)
        )
        return DeleteResult(deleted, version, chosen.name)

    def update_schema(self, columns: pa.Schema | Sequence[pa.Field] | pa.Field) -> SchemaChange:
        """Schema evolution: add new nullable columns. Changing or dropping one raises
        SchemaMismatchError (expected vs actual); columns already present are left alone."""
        fields = [columns] if isinstance(columns, pa.Field) else columns
        if not isinstance(fields, pa.Schema | list | tuple) or not all(
            isinstance(f, pa.Field) for f in fields
        ):
            raise InvalidQueryError(
                f"update_schema takes pyarrow fields (pa.field(name, type)), got {columns!r}"
            )
        fields = list(fields)
        current = self.schema
        added = []
        for field in fields:
            if field.name in current.names:
                existing = current.field(field.name)
                if existing.type != field.type:
                    raise SchemaMismatchError(
                        f"column {field.name} cannot change type",
                        expected=f"{field.name}: {existing.type}",
                        actual=f"{field.name}: {field.type}",
                    )
                continue
            if not field.nullable:
                raise SchemaMismatchError(
                    f"new column {field.name} must be nullable (old rows have no value)",
                    expected=f"{field.name}: {field.type} NULL",
                    actual=f"{field.name}: {field.type} NOT NULL",
                )
            if pa.types.is_null(field.type):
                raise SchemaMismatchError(
                    f"new column {field.name} has no type (all values NULL?)",
                    expected="a concrete type",
                    actual="null",
                )
            added.append(field)
        if not added:
            return SchemaChange([], self.version())
        delta_fields = [DeltaField.from_arrow(f) for f in added]
        lakehouse = self.connector.lakehouse
        _, version = self._committing(
            "update_schema",
            self.connector.engines.delta_rs,  # schema changes are delta-rs's, whatever the engine
            lambda commit_id: self.delta().alter.add_columns(
                delta_fields, commit_properties=lakehouse.commit_properties(commit_id=commit_id)
            ),
        )
        self.connector.forget_writer_handle(self.name)
        return SchemaChange([f.name for f in added], version)

    @measured("redact")
    def redact(
        self,
        attribute: str | None = None,
        *,
        pattern: str | None = None,
        mode: redaction.Mode = "hash",
        where: str | None = None,
        partition_path: str | None = None,
        actor: str | None = None,
    ) -> RedactResult:
        """Rewrite personal data in place: the value of attribute `attribute` in every
        attribute map of the selected rows, or every match of the regular expression `pattern`
        in attribute values and log bodies — as its keyed hash (`mode="hash"`: stable, so
        joins still work), as a mask ("mask") or not at all ("drop").

        Rows are selected by `where` and `partition_path` (all rows without either). Each
        partition where a selected row changes is rewritten in one commit; then the old files,
        log entries and change data are purged as a hard delete does, and an `_audit` record is
        appended. When no row changes (nothing matched, or an earlier run already redacted it)
        nothing is rewritten or purged, so time travel goes on as before; the audit record says
        0 rows. When a partition fails part-way (an error, the store, Ctrl-C), the partitions
        already rewritten are purged and audited all the same (the record's predicate ends in
        `[incomplete: <error type>]`) before the error is raised; running it again finishes
        the rest. Needs the `[privacy]` hash key (in every mode: the audit record hashes the
        condition). Runs on delta-rs.
        """
        self._allowed("delete")
        hashed = self._keyed_hash()
        how = redaction.redaction(attribute, pattern, mode, hashed if mode == "hash" else None)
        erasure.check_purgeable(self.connector.lakehouse, self.name, self.delta())
        parts = [self.partition(partition_path)] if partition_path is not None else []
        if where is not None:
            parts.append(self.predicate(where))
        selection = conjunction(parts)
        before = self.version()
        columns = self.delta().metadata().partition_columns
        selected = self.query()
        if selection is not None:
            selected = selected.filter(selection)
        found = selected.select(columns).to_arrow().group_by(columns).aggregate([]).to_pylist()
        found.sort(key=lambda values: [str(values[c]) for c in columns])  # the same order each run
        target = f"attribute {attribute}" if attribute else f"pattern {hashed(pattern or '')}"
        condition = f" where {selection.with_hashed_literals(hashed)}" if selection else ""
        rewritten = 0
        # nothing rewritten: no purge, which would end time travel for no erasure at all
        with self._erasing(
            "redact", f"{mode} {target}{condition}", before, actor, always=False
        ) as done:
            for values in found:
                scope = parse_predicate(
                    " AND ".join(f"{c} = {sql_literal(values[c], 'datafusion')}" for c in columns),
                    self.schema,
                )
                changed = self._retrying(
                    "redact",
                    self.connector.engines.delta_rs,
                    lambda scope=scope: self._redact_partition(scope, selection, how, columns),
                )
                done.rows += changed
                if changed:  # a partition with no changed row is not rewritten
                    rewritten += 1
                    done.committed = True
        purged = done.purged
        assert purged is not None
        return RedactResult(
            done.rows, rewritten, purged.version, purged.files_purged, purged.log_entries_removed
        )

    def _redact_partition(
        self,
        scope: Predicate,
        selection: Predicate | None,
        how: redaction.Redaction,
        partition_columns: list[str],
    ) -> int:
        """Rewrite one partition with its selected rows redacted (one commit, which replaces
        exactly that partition's files); returns the rows that changed."""
        import pyarrow.dataset as ds  # here: its import loads pandas (otel_delta/nopandas.py)

        data = self.query().filter(scope).to_arrow()
        selected = (  # the selection's truth per row (NULL = not selected)
            ds.dataset(data).to_table(columns={"m": selection.to_arrow()}).column("m")
            if selection is not None
            else None
        )
        rows = data.to_pylist()
        changed = 0
        for index, row in enumerate(rows):
            if selected is not None and not selected[index].as_py():
                continue
            changed += redaction.redact_row(row, how)
        if changed:
            write_deltalake(
                self.uri,
                pa.Table.from_pylist(rows, schema=data.schema),
                mode="overwrite",
                predicate=scope.to_sql("datafusion"),
                partition_by=partition_columns,
                storage_options=self.connector.storage_options,
                writer_properties=self.connector.lakehouse.writer_properties(self.name),
                commit_properties=self.connector.lakehouse.commit_properties(),
            )
        return changed

    # --- reads -----------------------------------------------------------------------------

    def changes(self, start_version: int | None = None, end_version: int | None = None) -> pa.Table:
        """The change data feed between two versions (inclusive): every inserted, updated
        (`update_preimage` / `update_postimage`) and deleted row, with `_change_type`,
        `_commit_version` and `_commit_timestamp`. Needs `[deltalake.table]
        change_data_feed = true`; the feed starts at the version that turned it on, which is
        where `start_version` (None) starts by default: from 0, a table that got the feed after
        its creation answered only "has no version 0..None"."""
        delta = self.delta()
        if delta.metadata().configuration.get(CHANGE_DATA_FEED) != "true":
            if self.connector.lakehouse.change_data_feed:  # set, not yet written since
                raise InvalidQueryError(
                    f"table {self.name} has no change data feed yet: it starts at the table's "
                    "next write since [deltalake.table] change_data_feed was turned on"
                )
            raise InvalidQueryError(
                f"table {self.name} has no change data feed: set [deltalake.table] "
                "change_data_feed = true (changes are recorded from then on)"
            )
        for value, what in ((start_version, "start_version"), (end_version, "end_version")):
            if value is not None:
                whole_number(value, what)
        if None not in (start_version, end_version) and end_version < start_version:
            raise InvalidQueryError(
                f"end_version {end_version} is before start_version {start_version}"
            )
        first = self._feed_start()
        if start_version is None:
            start_version = first
        elif start_version < first:
            raise VersionNotFoundError(
                self.name,
                f"{start_version} in its change data feed, which starts at version {first} "
                "(when the feed was turned on)",
            )
        try:
            reader = delta.load_cdf(starting_version=start_version, ending_version=end_version)
            changes = pa.RecordBatchReader.from_stream(reader).read_all()
        except (DeltaError, OSError, ValueError) as exc:
            raise VersionNotFoundError(self.name, f"{start_version}..{end_version}") from exc
        # delta-rs reads the feed with view types (string_view, …): give the table's own
        schema = pa.schema(delta.schema().to_arrow())
        wanted = pa.schema(
            [schema.field(f.name) if f.name in schema.names else _plain(f) for f in changes.schema]
        )
        return changes.cast(wanted)

    def _feed_start(self) -> int:
        """The first version of the change data feed: the newest commit that turned it on (a
        table-properties change), else the oldest version the log still holds (a table created
        with the feed)."""
        history = self._history()
        for commit in history:
            properties = (commit.get("operationParameters") or {}).get("properties")
            try:
                turned_on = json.loads(properties).get(CHANGE_DATA_FEED) == "true"
            except (TypeError, ValueError, AttributeError):
                continue
            if turned_on:
                return int(commit["version"])
        return min((int(c["version"]) for c in history if "version" in c), default=0)

    def query(self) -> Query:
        return Query(self)

    def trace(self, trace_id: str) -> pa.Table:
        """All spans of one trace, sorted by start time; pruned by trace_id min/max stats."""
        return self.trace_query(trace_id).to_arrow()

    def trace_query(self, trace_id: str) -> Query:
        """The query `trace` runs (call `.explain()` on it to see the files it scans)."""
        if self.name != "spans":
            raise InvalidQueryError(f"trace() reads the spans table, not {self.name}")
        wanted = checked_trace_id(trace_id)
        node = Compare("=", Column("trace_id", pa.string()), Value(wanted, pa.string()))
        predicate = Predicate(f"trace_id = '{wanted}'", node)
        return self.query().filter(predicate).order_by("start_time_unix_nano", "span_id")

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Commits, newest first (at most `limit`)."""
        if limit is not None:
            whole_number(limit, "limit", minimum=1)
        entries = []
        # the times `as_of` goes by (monotonic), as Delta's history shows them: made so over
        # HISTORY_CONTEXT commits more than shown, so that an earlier commit's later stamp
        # (another writer's clock) is seen as `as_of`, which reads the whole log, sees it
        context = None if limit is None else limit + HISTORY_CONTEXT
        timed = monotonic_times(self._history(context))
        for at, commit in reversed(timed if limit is None else timed[-limit:]):
            entries.append(
                HistoryEntry.of_commit(
                    version=int(commit["version"]),
                    timestamp=datetime.fromtimestamp(at / 1000, UTC),
                    operation=str(commit.get("operation", "")),
                    parameters=dict(commit.get("operationParameters") or {}),
                    metrics=dict(commit_metrics(commit)),
                    user=commit.get("userName") or commit.get("engineInfo"),
                )
            )
        return entries

    def metadata(self) -> TableMetadata:
        delta = self.delta()
        meta = delta.metadata()
        properties = dict(meta.configuration)
        version = properties.get(SCHEMA_VERSION_PROPERTY)
        created = meta.created_time
        return TableMetadata(
            name=self.name,
            uri=self.uri,
            version=delta.version(),
            schema=pa.schema(delta.schema().to_arrow()),
            partition_columns=list(meta.partition_columns),
            properties=properties,
            schema_version=int(version) if version is not None else None,
            created_time=datetime.fromtimestamp(created / 1000, UTC) if created else None,
            description=meta.description,
            id=str(meta.id),
        )

    def statistics(self) -> TableStatistics:
        delta = self.delta()
        files = file_stats(pa.table(delta.get_add_actions(flatten=True)))
        threshold = self._settings.storage.min_file_size
        partitions = {tuple(sorted(f.partition.items(), key=lambda kv: kv[0])) for f in files}
        return TableStatistics(
            version=delta.version(),
            size_bytes=sum(f.size_bytes for f in files),
            files=len(files),
            partitions=len(partitions) if files else 0,
            rows=sum(f.num_records or 0 for f in files),
            small_files=sum(1 for f in files if f.size_bytes < threshold),
            small_file_threshold=threshold,
        )

    # --- maintenance -----------------------------------------------------------------------

    @measured("optimize")
    def optimize(
        self,
        where: str | None = None,
        z_order: Sequence[str] | None = None,
        *,
        target_size: int | None = None,
        engine: EngineName | None = None,
    ) -> OptimizeResult:
        """Compact small files (and Z-order by columns); `where` may only name partition
        columns. A dataChange=false commit: concurrent appends are not disturbed.

        Runs while this process holds the table's maintenance lease (engines/lease.py), taken
        for the call and released after it unless the process held it already (a bridge's
        maintainer): LeaseHeldError when another process holds it, since two rewrites of the
        same files at once would both land and store their rows twice. A call with nothing to
        rewrite (maintenance.rewrite_due: no two small files of a partition fit together)
        commits nothing, the lease neither, and reports the version the table was at."""
        if target_size is not None:
            whole_number(target_size, "target_size", minimum=1)
        chosen = self._engine(engine)
        delta = self.delta()
        schema = pa.schema(delta.schema().to_arrow())
        partition_columns = list(delta.metadata().partition_columns)
        columns = maintenance.z_order_columns(z_order, schema, partition_columns)
        predicate = parse_predicate(where, schema) if where else None
        filters = None
        if predicate is not None:
            filters = maintenance.partition_filters(predicate, partition_columns)
            maintenance.check_partitions_exist(self.name, predicate, delta)
        size = target_size or self._settings.storage.file_size_target
        where_sql = predicate.to_sql(chosen.dialect) if predicate else None
        metrics: dict[str, Any]
        try:
            # decided after any rewrite of this table by this process (its maintainer) is done
            with LEASES.exclusive(delta):
                delta = self.delta()
                found = delta.version()
                if not maintenance.rewrite_due(delta, predicate, bool(columns), size):
                    nothing = dict(NOTHING_OPTIMIZED)
                    return OptimizeResult(found, 0, 0, 0, columns, chosen.name, nothing)
                with LEASES.holding(delta, self._settings.table.maintenance_lease_seconds):
                    pause_point("optimize-leased")
                    metrics, version = self._committing(
                        "optimize",
                        chosen,
                        lambda commit_id: chosen.optimize(
                            self.name, where_sql, filters, columns, size, commit_id
                        ),
                        found=found,
                    )
        except CommitFailedError as exc:  # the lease's commit lost to another kind of commit
            raise self._conflict(exc, 1) from None
        except OSError as exc:
            raise StoreUnavailableError(self.name, self.uri, describe(exc)) from None
        added, removed, partitions = maintenance.optimize_counts(metrics)
        return OptimizeResult(
            version=version,
            files_added=added,
            files_removed=removed,
            partitions_optimized=partitions,
            z_order=columns,
            engine=chosen.name,
            metrics=metrics,
        )

    @measured("vacuum")
    def vacuum(
        self,
        retention_hours: int | None = None,
        dry_run: bool = False,
        *,
        engine: EngineName | None = None,
    ) -> VacuumResult:
        """Delete files no longer referenced and older than the retention (default from
        deltalake.table.retention_hours, 168). Files are returned relative to the table root."""
        chosen = self._engine(engine)
        hours = self._settings.table.retention_hours if retention_hours is None else retention_hours
        # delta-rs keeps the retention as milliseconds in an i64
        whole_number(hours, "retention_hours", maximum=INT64_MAX // 3_600_000)
        files = self._retrying("vacuum", chosen, lambda: chosen.vacuum(self.name, hours, dry_run))
        relative = sorted(maintenance.relative_path(self.uri, f) for f in files)
        return VacuumResult(relative, dry_run, hours, chosen.name)

    @measured("restore")
    def restore(
        self,
        version: int | None = None,
        *,
        timestamp: datetime | str | None = None,
        engine: EngineName | None = None,
    ) -> RestoreResult:
        """Make the table's current state that of an earlier version (a new commit)."""
        if (version is None) == (timestamp is None):
            raise InvalidQueryError("restore needs exactly one of version or timestamp")
        if version is not None:
            restored_to = whole_number(version, "version")
            current = self.version()
            if restored_to > current:
                raise VersionNotFoundError(self.name, str(restored_to))
            self.delta(restored_to)  # VersionNotFoundError if its log entry is gone
        else:
            assert timestamp is not None
            # restored by version: the engines' own time lookup has the same flaw
            restored_to = self.delta_as_of(timestamp).version()
            current = self.version()
        if restored_to == current:  # the table is that version's state already: no commit
            return RestoreResult(
                version=current, restored_to=current, files_added=0, files_removed=0
            )
        chosen = self._engine(engine)
        try:
            (added, removed), version = self._committing(
                "restore",
                chosen,
                lambda commit_id: chosen.restore(self.name, restored_to, commit_id),
            )
        except DeltaError as exc:
            raise VersionNotFoundError(
                self.name, str(restored_to), "its data files were removed by vacuum"
            ) from exc
        return RestoreResult(
            version=version,
            restored_to=restored_to,
            files_added=added,
            files_removed=removed,
        )

    def checkpoint(self) -> int:
        """Write a checkpoint of the current version (readers then skip replaying the JSON log);
        returns that version."""
        delta = self.delta()
        delta.create_checkpoint()
        return delta.version()

    def cleanup_log(self) -> int:
        """Delete log entries older than delta.logRetentionDuration that a checkpoint has made
        redundant, and thin the older checkpoints to one an hour
        (engines/checkpoint_thinning.py); returns how many commits were removed. Time travel to
        those versions is no longer possible afterwards; to a version between the hours' kept
        checkpoints it replays at most an hour of commits and a checkpoint's interval."""
        before = self._log_files()
        delta = self.delta()  # one open: each lists the whole log on a local disk
        delta.cleanup_metadata()
        retention = log_retention_seconds(delta.metadata().configuration)
        thinned = thin_checkpoints(self._files(), time.time(), retention)
        if thinned:
            log.debug("%s: %d older checkpoints deleted", self.name, len(thinned))
        return before - self._log_files()

    def log_files(self) -> commit_log.LogFiles:
        """The files of the table's Delta log: commits, checkpoints and their bytes (one
        listing). Every open lists them on a local disk; they are what `log_retention_hours`
        and the checkpoint thinning bound (README, Long-run table health)."""
        return commit_log.log_files(self._files())

    def _log_files(self) -> int:
        """Commits still in the log (local or object store alike), counted from one listing:
        reading them all, as a history would, read the whole log twice per cleanup."""
        return commit_log.count_commits(self._files())

    def _history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first, each numbered by its log entry (engines/commit_log:
        delta-rs's history misnumbers them when a commit lands while it reads)."""
        latest = self.delta().version()
        return commit_log.history(self._files(), latest, limit)

    def _version_at(self, limit_ms: float) -> int | None:
        """`version_at` over the whole log; over a long one (more than AS_OF_SEARCH_FROM
        commits), over HISTORY_CONTEXT commits either side of the version a binary search by
        the commits' own stamps lands on. On an object store each commit read is a GET: a
        week of 10 s flushes is 60,480 of them (minutes), the search and its window about 220.
        The window's times are made monotonic over the window, as a limited `history` makes
        them; an answer at the window's edge, or a search that cannot tell (a commit without a
        stamp), reads the whole log."""
        files = self._files()
        latest = self.delta().version()
        oldest = commit_log.oldest_commit(files, latest)
        if latest - oldest + 1 > AS_OF_SEARCH_FROM:
            found = commit_log.stamped_at_or_before(files, oldest, latest, limit_ms)
            if found is not None:
                top = min(latest, found + HISTORY_CONTEXT)
                bottom = max(oldest, found - HISTORY_CONTEXT)
                chosen = version_at(commit_log.history(files, top, top - bottom + 1), limit_ms)
                if (
                    chosen is not None
                    and (chosen > bottom or bottom == oldest)
                    and (chosen < top or top == latest)
                ):
                    return chosen
        return version_at(commit_log.history(files, latest), limit_ms)

    def _files(self) -> pafs.FileSystem:
        """The table's files, rooted at its directory (any store delta-rs reaches)."""
        return table_filesystem(self.uri, self.connector.storage_options, create=False)


# commits read before the oldest a limited history shows, for its times (`Table.history`),
# and either side of the version `as_of` searches out in a long log (`Table._version_at`)
HISTORY_CONTEXT = 100
AS_OF_SEARCH_FROM = 4 * HISTORY_CONTEXT  # commits in the log from which `as_of` searches


def monotonic_times(history: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """The commits oldest first, each with its time in ms made monotonic as Delta's history
    makes it: at least 1 ms after the one before. Writers' clocks differ (several bridges, a
    Spark job), and a commit stamped before its predecessor would otherwise put the versions
    out of time order: `as_of` would take every version before it, also those stamped after
    the time asked. A commit without a timestamp counts as 1 ms after the one before (the
    epoch, if it is the oldest read)."""
    timed: list[tuple[float, dict[str, Any]]] = []
    previous = float("-inf")
    for entry in sorted((e for e in history if "version" in e), key=lambda e: e["version"]):
        stamped = entry.get("timestamp")
        if stamped is not None:
            previous = max(float(stamped), previous + 1)
        else:  # the oldest commit read without one: the epoch, as nothing says better
            previous = previous + 1 if previous > float("-inf") else 0.0
        timed.append((previous, entry))
    return timed


def version_at(history: list[dict[str, Any]], limit_ms: float) -> int | None:
    """The latest version committed at or before `limit_ms`, by `monotonic_times`."""
    latest: int | None = None
    for at, entry in monotonic_times(history):
        if at > limit_ms:
            break
        latest = entry["version"]
    return latest


def _plain(field: pa.Field) -> pa.Field:
    """A view-typed column of the change feed's own (`_change_type`) as a plain one."""
    if pa.types.is_string_view(field.type):
        return field.with_type(pa.string())
    if pa.types.is_binary_view(field.type):
        return field.with_type(pa.binary())
    return field


TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")


def checked_trace_id(trace_id: object) -> str:
    """A trace id as the tables hold it (32 lowercase hex digits), or InvalidQueryError."""
    if not isinstance(trace_id, str) or not TRACE_ID.fullmatch(trace_id.strip()):
        raise InvalidQueryError(f"trace id must be 32 hex digits, got {trace_id!r}")
    return trace_id.strip().lower()


def commit_metrics(commit: dict[str, Any]) -> dict[str, Any]:
    """A commit's metrics: the engine's (`operationMetrics`), each replaced by the figure our
    own code recorded under the same name, if any (a vacuum's file counts: delta-rs's include
    files that were already gone, engines/vacuum.py); ours alone for a commit of files our
    own code wrote."""
    own = recorded_metrics(commit)
    engine = commit.get("operationMetrics")
    if not engine:
        return own
    return {name: own.get(name, value) for name, value in dict(engine).items()}


def recorded_metrics(commit: dict[str, Any]) -> dict[str, int]:
    """The metrics of a commit of files our own code wrote (lakehouse.METRICS_PREFIX)."""
    out = {}
    for key, value in commit.items():
        if key.startswith(METRICS_PREFIX):
            try:
                out[key.removeprefix(METRICS_PREFIX)] = int(value)
            except (TypeError, ValueError):
                continue
    return out


@dataclass
class _Erasure:
    """A hard delete or a redaction (Table._erasing): what its audit record says, and the
    progress of its rewrite."""

    operation: str
    predicate: str  # its literals already hashed
    before: int  # the table's version before it
    actor: str | None
    rows: int = 0
    committed: bool = False  # a commit of it is in the table: the purge must follow
    purged: erasure.Purge | None = None
