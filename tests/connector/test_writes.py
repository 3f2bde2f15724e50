"""Upsert, bulk insert, delete and schema evolution on bridge-written tables."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.errors import (
    InvalidPredicateError,
    InvalidQueryError,
    InvalidRequestError,
    OperationDisabledError,
    SchemaMismatchError,
)
from tests import corpus
from tests.connector import data
from tests.helpers import read_table, running_bridge

pytestmark = pytest.mark.e2e  # tables written by a real bridge (gRPC server)


def one_span(spans, trace_hex: str) -> dict:
    rows = spans.query().filter(f"trace_id = '{trace_hex}'").order_by("span_id").to_pylist()
    return rows[0]


def test_upsert_dicts_counts_updates_inserts_and_batch_duplicates(spans) -> None:
    rows_before = spans.query().count()
    existing = one_span(spans, data.trace_id("cart", data.DAYS[0], 0, 0).hex())
    changed = {**existing, "name": "renamed"}
    new = {**existing, "span_id": "ffffffffffffffff", "name": "new span"}
    stale = {**existing, "name": "stale"}  # same key, earlier in the batch: must lose
    result = spans.upsert([stale, changed, new, new])
    assert (result.inserted, result.updated, result.deduplicated) == (1, 1, 2)
    assert result.upserted == 2 and result.engine == "delta-rs"
    assert spans.query().count() == rows_before + 1
    got = spans.query().filter(f"span_id = '{existing['span_id']}'").to_pylist()
    assert [r["name"] for r in got] == ["renamed"]
    assert got[0]["attributes"] == existing["attributes"]  # the whole row was replaced as given
    assert spans.query().filter("span_id = 'ffffffffffffffff'").count() == 1
    assert spans.history(1)[0].operation == "MERGE"


def test_upsert_without_dedupe_of_two_records_for_one_row_is_an_invalid_query(spans) -> None:
    existing = one_span(spans, data.trace_id("cart", data.DAYS[0], 0, 0).hex())
    version = spans.version()
    twice = [{**existing, "name": "one"}, {**existing, "name": "two"}]
    with pytest.raises(InvalidQueryError, match="dedupe=True"):
        spans.upsert(twice, dedupe=False)
    assert spans.version() == version


def test_a_refused_upsert_leaves_the_schema_as_it_was(lake, spans) -> None:
    gauge = lake.get_or_create_table("metrics_gauge")
    existing = one_span(spans, data.trace_id("cart", data.DAYS[0], 0, 0).hex())
    before = {name: table.schema.names for name, table in (("g", gauge), ("s", spans))}
    with pytest.raises(SchemaMismatchError, match="no default merge key"):
        gauge.upsert([{"name": "m", "value_double": 1.0, "time_unix_nano": 1}])  # `name`: new
    with pytest.raises(SchemaMismatchError, match="merge key"):
        spans.upsert({**existing, "nam": "x"}, merge_key=["nope"])
    with pytest.raises(InvalidQueryError, match="not in partition"):
        spans.upsert(
            {**existing, "extra": "x"},
            partition_path=f"service_name=checkout/date={existing['date']}",
        )
    # a new column named as the key, and a record without it: refused after the column was
    # added (ADD COLUMN committed), though the call changed nothing else
    with pytest.raises(InvalidQueryError, match="no value in any merge key column"):
        spans.upsert(
            [{**existing, "tenant_x": "a"}, {**existing, "span_id": "f" * 16, "tenant_x": None}],
            merge_key=["tenant_x"],
        )
    assert {"g": gauge.schema.names, "s": spans.schema.names} == before


def test_an_upsert_of_records_without_a_key_value_is_refused(spans) -> None:
    """A column added by a typo (schema evolution) and then named as the merge key: NULL in the
    record and in every row, NULL-safe keys would have matched them all and replaced the whole
    table with one record. Refused, the table unchanged."""
    existing = one_span(spans, data.trace_id("cart", data.DAYS[0], 0, 0).hex())
    spans.upsert({**existing, "nosuch": 1})  # the typo: a new column, NULL in every other row
    version, rows = spans.version(), spans.query().count()
    with pytest.raises(InvalidQueryError, match="no value in any merge key column"):
        spans.upsert({**existing, "name": "one"}, merge_key=["nosuch"])
    assert spans.version() == version
    assert spans.query().count() == rows
    assert spans.query().filter("name = 'one'").count() == 0


def test_records_get_what_the_bridge_derives_and_spans_need_ids(spans) -> None:
    """A dict without `service_name`, `date` or `start_time` gets them from its resource and
    its nanosecond time, as the bridge's converter would; so an upsert of such a dict updates
    the row the bridge wrote instead of inserting a second one beside it."""
    existing = one_span(spans, data.trace_id("cart", data.DAYS[0], 0, 0).hex())
    given = {k: v for k, v in existing.items() if k not in ("service_name", "date", "start_time")}
    result = spans.upsert({**given, "name": "renamed"})
    assert (result.inserted, result.updated) == (0, 1)
    (row,) = spans.query().filter(f"span_id = '{existing['span_id']}'").to_pylist()
    assert row == {**existing, "name": "renamed"}

    rows_before = spans.query().count()
    bad = [
        ({"name": "no time", "trace_id": "1" * 32, "span_id": "1" * 16}, "no date"),
        ({**given, "trace_id": None}, "trace_id"),
        ({**given, "trace_id": "1"}, "trace_id"),
        ({**given, "span_id": "X" * 16}, "span_id"),
    ]
    for record, named in bad:
        with pytest.raises(InvalidRequestError, match=named):
            spans.bulk_insert(record)
    with pytest.raises(InvalidRequestError, match="trace_id"):
        spans.bulk_insert(pa.table({"trace_id": [1, 2], "start_time_unix_nano": [5, 6]}))
    assert spans.query().count() == rows_before


def test_upsert_otlp_request_is_idempotent(spans) -> None:
    request = data.spans_request("checkout", data.DAYS[1], 1)
    rows_before = spans.query().count()
    result = spans.upsert(request)
    assert (result.inserted, result.updated) == (0, data.TRACES_PER_REQUEST * 3)
    assert spans.query().count() == rows_before
    request.resource_spans[0].scope_spans[0].spans[0].name = "changed by upsert"
    request.resource_spans[0].scope_spans[0].spans.add(
        trace_id=b"\x42" * 16,
        span_id=b"\x43" * 8,
        start_time_unix_nano=data.day_nanos(data.DAYS[1]),
    )
    result = spans.upsert(request)
    assert (result.inserted, result.updated) == (1, data.TRACES_PER_REQUEST * 3)
    assert spans.query().filter("name = 'changed by upsert'").count() == 1
    assert spans.trace("42" * 16).num_rows == 1


def test_upsert_arrow_and_merge_condition_prunes_by_partition(spans) -> None:
    source = spans.query().filter("service_name = 'search' AND date = '2024-11-19'").to_arrow()
    source = source.set_column(
        source.schema.get_field_index("status_message"),
        "status_message",
        pa.array(["patched"] * source.num_rows),
    )
    result = spans.upsert(source)
    assert (result.inserted, result.updated) == (0, source.num_rows)
    metrics = spans.history(1)[0].metrics
    # only the 3 files of the one partition were rewritten
    assert metrics["num_target_files_removed"] == data.COMMITS_PER_PARTITION
    patched = spans.query().filter("status_message = 'patched'").to_arrow()
    assert patched.num_rows == source.num_rows


def test_logs_default_key_and_metrics_need_one(lake) -> None:
    logs = lake.table("logs")
    before = logs.query().count()
    result = logs.upsert(corpus.logs_request())
    assert (result.inserted, result.updated) == (0, before)
    gauge = lake.table("metrics_gauge")
    with pytest.raises(SchemaMismatchError, match="merge_key"):
        gauge.upsert(corpus.metrics_request())
    rows = gauge.query().count()
    result = gauge.upsert(
        corpus.metrics_request(), merge_key=["service_name", "metric_name", "time_unix_nano"]
    )
    assert result.inserted + result.updated == rows and result.updated == rows
    with pytest.raises(SchemaMismatchError, match="scalar"):
        gauge.upsert(corpus.metrics_request(), merge_key=["attributes"])
    with pytest.raises(SchemaMismatchError, match="not a column"):
        gauge.upsert(corpus.metrics_request(), merge_key=["nope"])


def test_bulk_insert_appends_like_the_bridge(spans, lake_path) -> None:
    before = spans.query().count()
    extra = spans.query().filter("service_name = 'cart'").to_arrow()
    result = spans.bulk_insert(extra)
    assert result.inserted == extra.num_rows
    assert spans.query().count() == before + extra.num_rows
    assert spans.history(1)[0].operation == "WRITE"
    assert spans.bulk_insert([]).inserted == 0
    batch = extra.to_batches()[0]
    assert spans.bulk_insert(batch).inserted == batch.num_rows
    assert read_table(lake_path, "spans").num_rows == spans.query().count()


def test_bulk_insert_into_a_partition_path_as_the_connector_toml_takes_it(spans) -> None:
    """`partition_path`, as on upsert and delete and as the connector TOML's bulk insert takes
    it (a TypeError before): records all in it are appended, a new partition included; one
    outside it refuses the call, nothing written."""
    cart = spans.query().filter("service_name = 'cart' AND date = '2024-11-19'").to_arrow()
    result = spans.bulk_insert(cart, partition_path="service_name=cart/date=2024-11-19")
    assert result.inserted == cart.num_rows
    moved = [
        {**row, "resource_attributes": {"service.name": "new-svc"}} for row in cart.to_pylist()
    ]
    for row in moved:
        del row["service_name"]  # derived from the resource, as the bridge does
    assert spans.bulk_insert(moved, partition_path="service_name=new-svc").inserted == len(moved)
    assert spans.query().filter("service_name = 'new-svc'").count() == len(moved)
    version = spans.version()
    with pytest.raises(InvalidQueryError, match="not in partition"):
        spans.bulk_insert(cart, partition_path="service_name=cart/date=2024-11-20")
    with pytest.raises(InvalidPredicateError, match="partition column"):
        spans.bulk_insert(cart, partition_path="name=x")
    assert spans.version() == version


def test_delete_counts_and_leaves_the_rest(spans) -> None:
    before = spans.query().to_arrow()
    result = spans.delete("service_name = 'cart' AND attributes['http.route'] = '/r/1'")
    expected = before.filter(
        (pc.field("service_name") == "cart")
        & (pc.map_lookup(pc.field("attributes"), pa.scalar("http.route"), "first") == "/r/1")
    ).num_rows
    assert result.deleted == expected > 0
    after = spans.query().to_arrow()
    assert after.num_rows == before.num_rows - expected
    assert spans.delete("service_name = 'no-such-service'").deleted == 0
    bound = "TIMESTAMP '2024-11-19T08:00:01Z'"
    where = f"date = '2024-11-19' AND start_time < {bound}"
    early = spans.query().filter(where).count()
    assert early > 0
    assert spans.delete(where).deleted == early
    assert spans.query().filter(f"start_time < {bound}").count() == 1  # the 1970 corpus span
    version = spans.version()
    for bad in ("service = 'cart'", "1=1; DROP TABLE spans", "service_name = 'cart' OR"):
        with pytest.raises(InvalidPredicateError):
            spans.delete(bad)
    assert spans.version() == version  # nothing was committed


def test_schema_evolution_adds_nullable_columns_and_the_bridge_keeps_writing(lake_path) -> None:
    lake = DeltaLakeConnector(DeltaConfig.for_path(lake_path))
    spans = lake.table("spans")
    change = spans.update_schema([pa.field("tenant_id", pa.string()), spans.schema.field("name")])
    assert change.added == ["tenant_id"]
    assert spans.schema.names[-1] == "tenant_id"
    assert spans.update_schema(pa.field("tenant_id", pa.string())).added == []
    old_rows = spans.query().filter("tenant_id IS NULL").count()
    assert old_rows == spans.query().count()
    before_change = spans.query().version(change.version - 1).to_arrow()  # time travel
    assert before_change.num_rows == old_rows
    assert before_change.column("tenant_id").null_count == old_rows

    with pytest.raises(SchemaMismatchError) as err:
        spans.update_schema(pa.field("duration_ns", pa.string()))
    assert err.value.expected == "duration_ns: int64" and err.value.actual == "duration_ns: string"
    with pytest.raises(SchemaMismatchError, match="nullable"):
        spans.update_schema(pa.field("required", pa.int64(), nullable=False))
    for bad in ("tenant", ["tenant"]):  # names without types: refused, not an AttributeError
        with pytest.raises(InvalidQueryError, match="pyarrow fields"):
            spans.update_schema(bad)

    # records with a new column evolve the table (auto_evolution is on by default)
    row = {**spans.query().limit(1).to_pylist()[0], "tenant_id": "acme", "region": "eu"}
    spans.upsert([row])
    assert spans.schema.names[-1] == "region"
    assert spans.query().filter("region = 'eu' AND tenant_id = 'acme'").count() == 1

    # the bridge (its own writer, base schema) still appends to the evolved table
    with running_bridge(lake_path) as bridge:
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(data.spans_request("late", data.DAYS[0], 0))
    assert spans.query().filter("service_name = 'late'").count() == 12
    assert spans.query().filter("service_name = 'late' AND region IS NULL").count() == 12


def test_records_that_do_not_fit_raise_schema_mismatch(lake_path) -> None:
    strict = DeltaConfig.for_path(lake_path, schema={"auto_evolution": False})
    spans = DeltaLakeConnector(strict).table("spans")
    version = spans.version()
    with pytest.raises(SchemaMismatchError, match="auto_evolution"):
        spans.upsert([{"trace_id": "ab" * 16, "span_id": "cd" * 8, "surprise": 1}])
    with pytest.raises(SchemaMismatchError) as err:
        spans.bulk_insert([{"trace_id": "ab" * 16, "duration_ns": "slow"}])
    assert err.value.expected == "int64"
    with pytest.raises(SchemaMismatchError):
        spans.bulk_insert(pa.table({"duration_ns": pa.array(["x"])}))
    with pytest.raises(InvalidRequestError):
        spans.upsert("not records")
    assert spans.version() == version


def test_invalid_otlp_records_write_nothing(spans) -> None:
    request = data.spans_request("cart", data.DAYS[0], 0)
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"short"
    version = spans.version()
    with pytest.raises(InvalidRequestError):
        spans.upsert(request)
    assert spans.version() == version


def test_disabled_operations_refuse(lake_path) -> None:
    config = DeltaConfig.for_path(
        lake_path,
        operations={"upsert_enabled": False, "delete_enabled": False, "bulk_insert_enabled": False},
    )
    spans = DeltaLakeConnector(config).table("spans")
    with pytest.raises(OperationDisabledError, match="upsert_enabled"):
        spans.upsert([])
    with pytest.raises(OperationDisabledError):
        spans.delete("service_name = 'cart'")
    with pytest.raises(OperationDisabledError):
        spans.bulk_insert([])
