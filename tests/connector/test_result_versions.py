"""A result's `version` is the version of the operation's own commit, not the table's latest.

Another writer (the bridge) appends while an operation runs; here those appends land between
the operation's commit and its result, every time (tests/connector/racing.py). A result that
named the latest version sent `restore(version=result.version - 1)` to the wrong state.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake.table import TableAlterer

from tests.connector import data
from tests.connector.racing import APPENDS, append_elsewhere, appending_after, operation_at


def test_delete_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    appended = appending_after(monkeypatch, spans.connector.engines.delta_rs, "delete", spans)
    result = spans.delete("service_name = 'search'")
    assert appended() == 1 and result.deleted > 0
    assert operation_at(spans, result.version) == "DELETE"
    assert spans.version() == result.version + APPENDS


def test_restore_to_before_a_delete_brings_its_rows_back(
    spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's undo: restore(version=result.version - 1) after the bridge appended."""
    search = "service_name = 'search'"
    rows = spans.query().filter(search).to_arrow().num_rows
    appending_after(monkeypatch, spans.connector.engines.delta_rs, "delete", spans)
    result = spans.delete(search)
    monkeypatch.undo()
    spans.restore(version=result.version - 1)
    assert spans.query().filter(search).to_arrow().num_rows == rows


def test_upsert_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    appended = appending_after(monkeypatch, spans.connector.engines.delta_rs, "merge", spans)
    records = spans.query().filter("service_name = 'checkout'").limit(3).to_arrow()
    result = spans.upsert(records)
    assert appended() == 1 and result.updated == 3
    assert operation_at(spans, result.version) == "MERGE"
    assert spans.version() == result.version + APPENDS


def test_insert_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    before = spans.version()
    appended = appending_after(monkeypatch, spans.connector.engines.delta_rs, "append", spans)
    result = spans.bulk_insert(data.spans_request("cart", data.DAYS[1], 500))
    assert appended() == 1 and result.inserted > 0
    assert result.version == before + 1
    assert spans.version() == result.version + APPENDS


def test_optimize_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    appended = appending_after(monkeypatch, spans.connector.engines.delta_rs, "optimize", spans)
    result = spans.optimize(where="service_name = 'cart'")
    assert appended() == 1 and result.files_removed > 0
    assert operation_at(spans, result.version) == "OPTIMIZE"
    # and the commit releasing the maintenance lease the call took (engines/lease.py)
    assert spans.version() == result.version + APPENDS + 1


def test_restore_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    target = spans.version()
    spans.delete("service_name = 'search'")
    appended = appending_after(monkeypatch, spans.connector.engines.delta_rs, "restore", spans)
    result = spans.restore(version=target)
    assert appended() == 1 and result.restored_to == target
    assert operation_at(spans, result.version) == "RESTORE"
    assert spans.version() == result.version + APPENDS


def test_schema_change_reports_its_own_commit(spans, monkeypatch: pytest.MonkeyPatch) -> None:
    appended = appending_after(monkeypatch, TableAlterer, "add_columns", spans)
    change = spans.update_schema(pa.field("tenant_id", pa.string()))
    assert appended() == 1 and change.added == ["tenant_id"]
    assert operation_at(spans, change.version) == "ADD COLUMN"
    assert spans.version() == change.version + APPENDS


def test_an_operation_that_commits_nothing_reports_the_version_it_found(
    spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No commit of its own: the version the table was at when it ran (as a restore to the
    current version, an empty upsert or a schema change that adds nothing already did)."""
    before = spans.version()
    appending_after(monkeypatch, spans.connector.engines.delta_rs, "delete", spans)
    result = spans.delete("service_name = 'nowhere'")
    assert result.deleted == 0
    assert result.version == before
    monkeypatch.undo()
    append_elsewhere(spans)
    assert spans.update_schema(spans.schema.field("name")).version == spans.version()
