"""Incoming records → an Arrow table in the target schema; merge keys, dedupe, merge condition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import Message

from otel_delta.connector.predicates import sql_literal
from otel_delta.convert.columns import timestamp_and_date
from otel_delta.convert.context import UNKNOWN_SERVICE
from otel_delta.errors import InvalidQueryError, InvalidRequestError, SchemaMismatchError
from otel_delta.signals import SIGNALS, signal_of_request
from otel_delta.sql import Dialect, quote_identifier
from otel_delta.tables import TABLES

# Identity of a row per table. Metric points are identified by their attribute maps, which
# cannot be merge-compared: those tables need an explicit merge_key.
DEFAULT_MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "spans": ("trace_id", "span_id"),
    "logs": ("time_unix_nano", "observed_time_unix_nano", "trace_id", "span_id", "body"),
}
MAX_PRUNING_VALUES = 1000  # above this many distinct partition values, let the engine prune
# Per table: the nanosecond times a row's TIMESTAMP column and `date` come from, first set
# first (a log record's time, else its observed time, as the converter has it), and that column:
# the signal registry's, so the upsert derives them as ingestion does
SQL_TIME: dict[str, tuple[tuple[str, ...], str]] = {
    name: (signal.time_columns, signal.timestamp_column)
    for signal in SIGNALS
    for name in signal.tables
}
# ids a span must have, as the tables hold them: lowercase hex of 16 and 8 bytes
SPAN_IDS = {"trace_id": 32, "span_id": 16}


def otlp_to_arrow(table_name: str, request: Message) -> pa.Table:
    """Convert an OTLP Export*ServiceRequest with the bridge's own converters."""
    signal = signal_of_request(request)
    if signal is None:
        raise InvalidRequestError(f"unsupported record type {type(request).__name__}")
    converted = signal.convert(request)
    if converted.rejected.count:
        raise InvalidRequestError(f"invalid request: {converted.rejected.error_message}")
    data = converted.tables.get(table_name)
    if data is not None:
        return data
    if table_name in signal.tables:  # e.g. metrics of other types only
        return TABLES[table_name].schema.empty_table()
    raise SchemaMismatchError(
        f"a {type(request).__name__} has no rows for table {table_name}",
        expected=f"records for {table_name}",
        actual=type(request).__name__,
    )


def to_arrow(records: Any, table_name: str, schema: pa.Schema) -> pa.Table:
    """Dicts, Arrow tables/batches (or a list of batches) or OTLP requests as one Arrow table."""
    if isinstance(records, pa.Table):
        return records
    if isinstance(records, pa.RecordBatch):
        return pa.Table.from_batches([records])
    if isinstance(records, Message):
        return otlp_to_arrow(table_name, records)
    if isinstance(records, Mapping):
        records = [records]
    if isinstance(records, Sequence) and not isinstance(records, str | bytes):
        items = list(records)
        if not items:
            return schema.empty_table()
        if all(isinstance(r, pa.RecordBatch) for r in items):
            return pa.Table.from_batches(items)
        if all(isinstance(r, Message) for r in items):
            return pa.concat_tables([otlp_to_arrow(table_name, r) for r in items])
        if all(isinstance(r, Mapping) for r in items):
            return _from_dicts(items, schema)
    raise InvalidRequestError(
        "records must be dicts, a pyarrow Table/RecordBatch or OTLP Export*ServiceRequest(s), "
        f"got {type(records).__name__}"
    )


def _from_dicts(rows: list[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    known = [schema.field(n) for n in names if n in schema.names]
    extra = [n for n in names if n not in schema.names]
    columns: dict[str, pa.Array] = {}
    for field in known:
        values = [row.get(field.name) for row in rows]
        try:
            columns[field.name] = pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            try:  # e.g. ISO strings for dates/timestamps: let Arrow cast them
                columns[field.name] = pa.array(values).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                sample = next((v for v in values if v is not None), None)
                raise SchemaMismatchError(
                    f"column {field.name}: values do not fit",
                    expected=str(field.type),
                    actual=f"{type(sample).__name__} {sample!r}"[:200],
                ) from None
    for name in extra:
        try:
            columns[name] = pa.array([row.get(name) for row in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaMismatchError(
                f"new column {name}: cannot infer one type", expected="one type", actual=str(exc)
            ) from None
    return pa.table(columns)


def complete(table_name: str, data: pa.Table) -> pa.Table:
    """Records (in the table's schema) as the bridge would have written them, where they left
    out what it derives: `service_name` from the resource's `service.name` (else
    unknown_service), `date` and the TIMESTAMP column from the row's nanosecond time. Refused
    (InvalidRequestError): rows with neither a date nor a time to derive it from, spans
    without valid ids."""
    if table_name not in SQL_TIME or data.num_rows == 0:
        return data
    if table_name == "spans":
        for column, digits in SPAN_IDS.items():
            pattern = f"^[0-9a-f]{{{digits}}}$"
            valid = pc.fill_null(pc.match_substring_regex(data.column(column), pattern), False)
            bad = data.num_rows - pc.sum(valid).as_py()
            if bad:
                raise InvalidRequestError(
                    f"{bad} of {data.num_rows} span(s) have no valid {column} "
                    f"(lowercase hex, {digits} digits)"
                )
    names, sql_time = SQL_TIME[table_name]
    nanos = data.column(names[0])
    for name in names[1:]:  # an unset time (0 or null) falls back to the next
        unset = pa.scalar(None, nanos.type)
        nanos = pc.coalesce(pc.if_else(pc.equal(nanos, 0), unset, nanos), data.column(name))
    # as the converters compute them (convert.columns), where the row has a time
    timestamps, dates = timestamp_and_date(pc.fill_null(nanos, 0).combine_chunks())
    untimed = pc.is_null(nanos)
    derived = {
        sql_time: pc.if_else(untimed, pa.scalar(None, timestamps.type), timestamps),
        "date": pc.if_else(untimed, pa.scalar(None, dates.type), dates),
        "service_name": pc.fill_null(
            pc.map_lookup(data.column("resource_attributes"), "service.name", "first"),
            UNKNOWN_SERVICE,
        ),
    }
    for name, values in derived.items():
        at = data.schema.get_field_index(name)
        data = data.set_column(at, data.schema.field(name), pc.coalesce(data.column(name), values))
    if undated := data.column("date").null_count:
        raise InvalidRequestError(
            f"{undated} of {data.num_rows} record(s) have no date, nor a "
            f"{' or '.join(names)} to derive it from"
        )
    return data


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """`data` in exactly `schema`: columns ordered, missing ones NULL, safe casts only.

    Extra columns must have been added to the table first (schema evolution).
    """
    extra = [n for n in data.column_names if n not in schema.names]
    if extra:
        raise SchemaMismatchError(
            f"records have column(s) the table lacks: {extra}",
            expected=f"columns of the table {schema.names}",
            actual=str(data.column_names),
        )
    arrays = []
    for field in schema:
        if field.name not in data.column_names:
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        column = data.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                raise SchemaMismatchError(
                    f"column {field.name} has an incompatible type",
                    expected=str(field.type),
                    actual=str(column.type),
                ) from None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def merge_keys(
    table_name: str,
    schema: pa.Schema,
    merge_key: Sequence[str] | str | None,
    partition_columns: Sequence[str],
) -> list:
    """The key columns, checked; the table's partition columns join the default key (they
    are derived from the row, and prune the merge), not a key the caller names, however it is
    spelled (a list, a tuple or "a, b")."""
    default = merge_key is None
    if isinstance(merge_key, str):
        merge_key = [k.strip() for k in merge_key.split(",")]
    if merge_key is None:
        if table_name not in DEFAULT_MERGE_KEYS:
            raise SchemaMismatchError(
                f"table {table_name} has no default merge key: pass merge_key=[...]",
                expected="merge_key",
                actual="None",
            )
        merge_key = DEFAULT_MERGE_KEYS[table_name]
    keys = list(dict.fromkeys(merge_key))
    if not keys:
        raise SchemaMismatchError("merge_key is empty", expected="column names", actual="[]")
    for key in keys:
        if key not in schema.names:
            raise SchemaMismatchError(
                f"merge key {key!r} is not a column of {table_name}",
                expected=f"one of {schema.names}",
                actual=key,
            )
        type_ = schema.field(key).type
        if pa.types.is_nested(type_) or pa.types.is_map(type_):
            raise SchemaMismatchError(
                f"merge key {key!r} must be a scalar column", expected="scalar", actual=str(type_)
            )
    if default:
        keys = [k for k in partition_columns if k in schema.names and k not in keys] + keys
    return keys


def check_keyed(data: pa.Table, keys: list[str]) -> None:
    """InvalidQueryError when a record has no value in any merge key column. Keys compare
    NULL-safe (NULLs equal), so such a record would match, and overwrite, every row whose key
    is NULL: a column added by a typo (schema evolution) and then named as the key replaced
    a whole table of spans with one record."""
    if not keys or data.num_rows == 0:
        return
    unkeyed = pc.is_null(data.column(keys[0]))
    for key in keys[1:]:
        unkeyed = pc.and_(unkeyed, pc.is_null(data.column(key)))
    if count := pc.sum(unkeyed.cast(pa.int64())).as_py():
        raise InvalidQueryError(
            f"{count} of {data.num_rows} record(s) have no value in any merge key column "
            f"({', '.join(keys)}): such a record would match every row whose key is NULL"
        )


def dedupe(data: pa.Table, keys: list[str]) -> tuple[pa.Table, int]:
    """Keep the last row of every key (NULLs compare equal); returns rows dropped."""
    if data.num_rows < 2:
        return data, 0
    index = "__otel_delta_row"
    numbered = data.select(keys).append_column(index, pa.array(range(data.num_rows), pa.int64()))
    last = numbered.group_by(keys, use_threads=False).aggregate([(index, "max")])
    rows = pc.sort_indices(last.column(f"{index}_max"))
    take = pc.take(last.column(f"{index}_max"), rows)
    kept = data.take(take)
    return kept, data.num_rows - kept.num_rows


def merge_condition(
    keys: list[str],
    source: pa.Table,
    dialect: Dialect,
    partition_columns: Sequence[str],
    target: str = "t",
    origin: str = "s",
) -> str:
    """`t.k <=> s.k AND ...`, plus literal partition values of the batch so the engine prunes."""
    parts = []
    for key in keys:
        left = f"{target}.{quote_identifier(key, dialect)}"
        right = f"{origin}.{quote_identifier(key, dialect)}"
        parts.append(
            f"({left} IS NOT DISTINCT FROM {right})"
            if _nullable(source, key)
            else f"{left} = {right}"
        )
    for key in keys:
        if key not in partition_columns:
            continue
        values = pc.unique(source.column(key))
        if values.null_count or len(values) > MAX_PRUNING_VALUES or len(values) == 0:
            continue
        literals = ", ".join(sql_literal(v, dialect) for v in values.to_pylist())
        parts.append(f"{target}.{quote_identifier(key, dialect)} IN ({literals})")
    return " AND ".join(parts)


def _nullable(source: pa.Table, key: str) -> bool:
    return source.column(key).null_count > 0
