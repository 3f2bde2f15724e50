"""Redaction (issue #15): the row rewrite itself, then `Table.redact` on bridge-written tables —
values hashed, masked or dropped, the old files purged, the audit record written."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from otel_delta.connector import DeltaLakeConnector
from otel_delta.connector.redaction import MASK, redact_row, redaction
from otel_delta.connector.results import RedactResult
from otel_delta.connector.table import Table
from otel_delta.errors import ConfigError, InvalidQueryError
from otel_delta.privacy import keyed_hash
from tests.connector.test_erasure import holds
from tests.helpers import data_files

KEY = b"redaction-key"
EMAILS = ("alice@example.com", "bob@example.org")


def hashed(text: str) -> str:
    return keyed_hash(text, KEY)


def span_row() -> dict:
    return {
        "name": "GET /users",
        "attributes": [("user.email", EMAILS[0]), ("http.route", "/users")],
        "attribute_types": [("user.email", '{"stringValue":"alice@example.com"}')],
        "resource_attributes": [("service.name", "cart"), ("user.email", EMAILS[1])],
        "resource_attribute_types": [],
        "events": [
            {"name": "login", "attributes": [("user.email", EMAILS[0])], "attribute_types": []}
        ],
        "links": [],
    }


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("hash", [hashed(EMAILS[0]), hashed(EMAILS[1]), hashed(EMAILS[0])]),
        ("mask", [MASK, MASK, MASK]),
        ("drop", [None, None, None]),
    ],
)
def test_an_attribute_is_rewritten_in_every_map_of_the_row(mode: str, expected: list) -> None:
    row = span_row()
    how = redaction("user.email", None, mode, hashed if mode == "hash" else None)
    assert redact_row(row, how)

    def value(pairs: list) -> str | None:
        return dict(pairs).get("user.email")

    found = [
        value(row["attributes"]),
        value(row["resource_attributes"]),
        value(row["events"][0]["attributes"]),
    ]
    assert found == expected
    assert row["attribute_types"] == []  # the typed copy of the value goes in every mode
    assert dict(row["attributes"])["http.route"] == "/users"  # nothing else changes
    assert not redact_row(
        span_row() | {"attributes": [], "resource_attributes": [], "events": []}, how
    )


def test_a_pattern_is_rewritten_in_values_typed_json_and_bodies() -> None:
    row = {
        "body": "mail alice@example.com or bob@example.org",
        "attributes": [("note", "from alice@example.com"), ("n", "5")],
        "attribute_types": [
            ("list", '{"arrayValue":{"values":[{"stringValue":"bob@example.org"}]}}')
        ],
    }
    how = redaction(None, r"[\w.]+@[\w.]+", "hash", hashed)
    assert redact_row(row, how)
    assert row["body"] == f"mail {hashed(EMAILS[0])} or {hashed(EMAILS[1])}"
    assert row["attributes"] == [("note", f"from {hashed(EMAILS[0])}"), ("n", "5")]
    assert EMAILS[1] not in row["attribute_types"][0][1]
    assert row["attribute_types"][0][1].startswith('{"arrayValue"')


@pytest.mark.parametrize("mode", ["hash", "mask"])
def test_redacting_again_changes_nothing(mode: str) -> None:
    """Equal in, equal out across runs: a value already of the form the mode writes is left as
    it is and the row does not count as changed (hash it again and joins on it would break)."""
    how = redaction("user.email", None, mode, hashed if mode == "hash" else None)
    row = span_row()
    assert redact_row(row, how)
    once = copy.deepcopy(row)
    assert not redact_row(row, how)
    assert row == once


def test_a_pattern_is_not_hashed_again_inside_its_own_hashes() -> None:
    """A pattern that matches hex digits would find them inside the first run's hashes."""
    how = redaction(None, r"[0-9a-f]{8,}", "hash", hashed)
    row = {
        "body": "session deadbeef01 ended",
        "attributes": [("session", "deadbeef01")],
        "attribute_types": [],
    }
    assert redact_row(row, how)
    assert row["body"] == f"session {hashed('deadbeef01')} ended"
    once = copy.deepcopy(row)
    assert not redact_row(row, how)
    assert row == once


def test_only_the_exact_form_of_a_keyed_hash_is_left_alone() -> None:
    how = redaction("k", None, "hash", hashed)
    row = {"attributes": [("k", hashed("x"))], "attribute_types": []}
    assert not redact_row(row, how)
    assert row["attributes"] == [("k", hashed("x"))]
    lookalikes = ["hmac-sha256:" + "A" * 64, "hmac-sha256:" + "a" * 63, " " + hashed("x")]
    for value in lookalikes:
        row = {"attributes": [("k", value)], "attribute_types": []}
        assert redact_row(row, how)
        assert row["attributes"] == [("k", hashed(value))]


@pytest.mark.parametrize(
    ("attribute", "pattern", "mode", "message"),
    [
        (None, None, "hash", "exactly one"),
        ("a", "b", "hash", "exactly one"),
        ("a", None, "erase", "mode must be one of"),
        (None, "(", "mask", "invalid pattern"),
        (None, "x*", "mask", "matches the empty string"),
        ("", None, "mask", "must not be empty"),
    ],
)
def test_bad_arguments(attribute, pattern, mode, message) -> None:
    with pytest.raises(InvalidQueryError, match=message):
        redaction(attribute, pattern, mode, hashed)


# --- on tables written by the bridge ---------------------------------------------------------


@pytest.fixture
def hash_key(monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", KEY.decode())
    return KEY


def with_emails(spans: Table) -> None:
    """Three cart spans get a user.email attribute (two share an address), then compaction
    leaves the addresses in tombstoned files as well."""
    rows = spans.query().filter("service_name = 'cart'").order_by("span_id").to_pylist()[:3]
    for row, email in zip(rows, (EMAILS[0], EMAILS[1], EMAILS[0]), strict=True):
        row["attributes"] = [*row["attributes"], ("user.email", email)]
    spans.upsert(rows)
    spans.optimize()


@pytest.mark.e2e
def test_redact_an_attribute_by_keyed_hash(
    lake: DeltaLakeConnector, spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    with_emails(spans)
    total = spans.query().count()
    outside = {f for f in spans.delta().file_uris() if "service_name=cart" not in f}
    assert holds(lake_path / "spans", *EMAILS)

    result = spans.redact("user.email", mode="hash", where="service_name = 'cart'", actor="dpo")

    assert result.rows_affected == 3 and result.partitions_rewritten == 2
    assert holds(lake_path / "spans", *EMAILS) == []
    assert spans.query().count() == total  # rows stay
    assert outside <= set(spans.delta().file_uris())  # other services' files untouched
    values = [
        dict(row["attributes"]).get("user.email")
        for row in spans.query().filter("service_name = 'cart'").to_pylist()
    ]
    assert sorted(v for v in values if v) == sorted(
        [hashed(EMAILS[0]), hashed(EMAILS[0]), hashed(EMAILS[1])]
    )  # equal addresses, equal hashes: joins still work
    record = lake.audit_log().to_pylist()[-1]
    assert (record["operation"], record["actor"], record["rows_affected"]) == ("redact", "dpo", 3)
    assert record["predicate"].startswith("hash attribute user.email where ")
    assert "cart" not in record["predicate"]
    assert record["files_purged"] == result.files_purged > 0


@pytest.mark.e2e
def test_redact_a_pattern_in_log_bodies_by_mask(
    lake: DeltaLakeConnector, lake_path: Path, hash_key: bytes
) -> None:
    logs = lake.table("logs")
    row = logs.query().limit(1).to_pylist()[0]
    row["body"] = f"password reset for {EMAILS[1]}"
    row["body_type"] = "string"
    logs.bulk_insert([row])
    result = logs.redact(pattern=r"[\w.]+@[\w.]+", mode="mask")
    assert result.rows_affected == 1
    assert logs.query().filter(f"body = 'password reset for {MASK}'").count() == 1
    assert holds(lake_path / "logs", EMAILS[1]) == []


@pytest.mark.e2e
def test_redact_needs_the_key(spans: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_DELTA_HASH_KEY", raising=False)
    version = spans.version()
    with pytest.raises(ConfigError, match="OTEL_DELTA_HASH_KEY"):
        spans.redact("user.email", mode="drop")  # every mode: the audit hashes the condition
    assert spans.version() == version


def emails(spans: Table) -> list[str | None]:
    rows = spans.query().filter("service_name = 'cart'").order_by("span_id").to_pylist()
    return [dict(row["attributes"]).get("user.email") for row in rows]


@pytest.mark.e2e
def test_redacting_by_hash_twice_leaves_the_hashes(spans: Table, hash_key: bytes) -> None:
    with_emails(spans)
    first = spans.redact("user.email", mode="hash")
    assert first.rows_affected == 3
    hashes = emails(spans)
    assert sorted(v for v in hashes if v) == sorted(hashed(e) for e in (*EMAILS, EMAILS[0]))

    second = spans.redact("user.email", mode="hash")

    assert second == RedactResult(0, 0, first.version, 0, 0)
    assert emails(spans) == hashes  # equal in, equal out, however often it runs
    assert spans.version() == first.version


@pytest.mark.e2e
def test_a_redaction_that_matches_nothing_changes_nothing(
    lake: DeltaLakeConnector, spans: Table, lake_path: Path, hash_key: bytes
) -> None:
    """No partition rewritten, no file purged, no log entry deleted (time travel goes on);
    the audit records the request and that it found nothing."""
    with_emails(spans)  # tombstoned files, and a log a purge would cut
    table = lake_path / "spans"
    version = spans.version()
    on_disk = data_files(table)
    log = sorted(path.name for path in (table / "_delta_log").iterdir())
    nothing = RedactResult(0, 0, version, 0, 0)

    assert spans.redact("no.such", mode="drop") == nothing
    assert spans.redact(pattern=r"no such text \d+", mode="mask") == nothing
    assert spans.redact("user.email", where="service_name = 'search'") == nothing

    assert data_files(table) == on_disk
    assert sorted(path.name for path in (table / "_delta_log").iterdir()) == log
    assert spans.version() == version
    assert spans.query().version(1).count() > 0  # time travel still works
    records = lake.audit_log().to_pylist()
    assert len(records) == 3
    for record in records:
        assert record["operation"] == "redact"
        assert (record["rows_affected"], record["files_purged"]) == (0, 0)
        assert record["log_entries_removed"] == 0
        assert record["version_before"] == record["version_after"] == version
