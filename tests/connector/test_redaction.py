"""Redaction (issue #15): the row rewrite itself, then `Table.redact` on bridge-written tables —
values hashed, masked or dropped, the old files purged, the audit record written."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValueList
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_delta.connector import DeltaLakeConnector
from otel_delta.connector.redaction import MASK, redact_row, redaction
from otel_delta.connector.results import RedactResult
from otel_delta.connector.table import Table
from otel_delta.convert.to_otlp import logs_from_arrow
from otel_delta.errors import ConfigError, InvalidQueryError
from otel_delta.privacy import keyed_hash
from tests.connector.test_erasure import holds
from tests.corpus import kv
from tests.helpers import data_files, refusing_new_files, running_bridge

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
        "attributes": [
            ("note", "from alice@example.com"),
            ("n", "5"),
            ("list", '["bob@example.org"]'),
        ],
        "attribute_types": [
            ("n", "int"),
            ("list", '{"arrayValue":{"values":[{"stringValue":"bob@example.org"}]}}'),
        ],
    }
    how = redaction(None, r"[\w.]+@[\w.]+", "hash", hashed)
    assert redact_row(row, how)
    assert row["body"] == f"mail {hashed(EMAILS[0])} or {hashed(EMAILS[1])}"
    assert row["attributes"] == [
        ("note", f"from {hashed(EMAILS[0])}"),
        ("n", "5"),
        ("list", f'["{hashed(EMAILS[1])}"]'),
    ]
    assert row["attribute_types"] == [
        ("n", "int"),
        ("list", f'{{"arrayValue":{{"values":[{{"stringValue":"{hashed(EMAILS[1])}"}}]}}}}'),
    ]


def test_a_pattern_reaches_every_typed_copy_and_keeps_the_types_readable() -> None:
    """Exemplars' filtered attributes and metric metadata are attribute lists too; a number
    that no longer is one becomes a string (its `int` entry would make to_otlp fail); kvlist
    keys stay, as attribute keys do."""
    typed = '{"kvlistValue":{"values":[{"key":"a@b.io","value":{"stringValue":"c@d.io"}}]}}'
    row = {
        "metric_metadata": [("owner", "m@x.io")],
        "metric_metadata_types": [],
        "attributes": [("phone", "5551234")],
        "attribute_types": [("phone", "int")],
        "exemplars": [
            {
                "filtered_attributes": [("who", '{"a@b.io":"c@d.io"}')],
                "filtered_attribute_types": [("who", typed)],
            }
        ],
    }
    assert redact_row(row, redaction(None, r"[\w.]+@[\w.]+|\d{7}", "mask", None))
    assert row["metric_metadata"] == [("owner", MASK)]
    assert (row["attributes"], row["attribute_types"]) == ([("phone", MASK)], [])
    exemplar = row["exemplars"][0]
    assert exemplar["filtered_attributes"] == [("who", f'{{"a@b.io":"{MASK}"}}')]
    assert exemplar["filtered_attribute_types"] == [("who", typed.replace("c@d.io", MASK))]
    once = copy.deepcopy(row)
    assert not redact_row(row, redaction(None, r"[\w.]+@[\w.]+|\d{7}", "mask", None))
    assert row == once


def test_an_empty_value_is_kept_unless_dropped() -> None:
    row = {"attributes": [("x", None)], "attribute_types": [("x", "empty")]}
    for mode in ("hash", "mask"):
        assert not redact_row(row, redaction("x", None, mode, hashed))
    assert row == {"attributes": [("x", None)], "attribute_types": [("x", "empty")]}
    assert redact_row(row, redaction("x", None, "drop", None))
    assert row == {"attributes": [], "attribute_types": []}


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


# --- typed JSON and partial failures, through the CLI as users run it -------------------------

EMAIL_PATTERN = r"[\w.+-]+@[\w-]+\.[\w.]+"
ACCENTED = "josé@exämple.com"  # the typed JSON holds it \u-escaped: jos\u00e9@ex\u00e4mple.com
SECRET = "secret-value"
WEB_SECRET = "secret-web"


def personal_logs() -> ExportLogsServiceRequest:
    """Service `aaa`: one log with a map body and a non-ASCII array attribute holding
    addresses, and `x` = SECRET; service `web`: one log whose `x` is an empty AnyValue and
    whose body holds WEB_SECRET."""

    def resource_logs(service: str, record: logs_pb2.LogRecord) -> logs_pb2.ResourceLogs:
        resource = Resource(attributes=[kv("service.name", AnyValue(string_value=service))])
        return logs_pb2.ResourceLogs(
            resource=resource, scope_logs=[logs_pb2.ScopeLogs(log_records=[record])]
        )

    now = time.time_ns()
    user = AnyValue(string_value=EMAILS[0])
    body = AnyValue(kvlist_value=KeyValueList(values=[kv("user", user)]))
    addresses = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=ACCENTED)]))
    aaa = logs_pb2.LogRecord(
        time_unix_nano=now,
        body=body,
        attributes=[kv("emails", addresses), kv("x", AnyValue(string_value=SECRET))],
    )
    web = logs_pb2.LogRecord(
        time_unix_nano=now,
        body=AnyValue(string_value=f"token {WEB_SECRET}"),
        attributes=[kv("x", AnyValue())],
    )
    return ExportLogsServiceRequest(
        resource_logs=[resource_logs("aaa", aaa), resource_logs("web", web)]
    )


@pytest.fixture
def personal_lake(tmp_path: Path, hash_key: bytes) -> tuple[Path, Path]:
    """A lakehouse whose logs the real bridge wrote from `personal_logs`, and its config."""
    lakehouse = tmp_path / "lake"
    with running_bridge(lakehouse) as bridge:
        _, _, logs = bridge.stubs(bridge.channel())
        logs.Export(personal_logs(), timeout=30)
    config = tmp_path / "deltalake.toml"
    config.write_text(f'[deltalake]\ntable_path = "{lakehouse}"\n')
    return lakehouse, config


def redact_cli(config: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_delta.cli",
            "redact",
            "logs",
            *argv,
            "--yes",
            *("--format", "json", "--config", str(config)),
        ],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def strings(value: Any) -> Iterator[str]:
    """Every string inside a row as read from Parquet (map keys and values, nested lists)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def files_holding(root: Path, *values: str) -> list[str]:
    """Files under `root` holding any of `values` or their JSON \\u-escaped forms: in the raw
    bytes (log entries, statistics) or in any string a Parquet file decodes to (data files,
    checkpoints, change data: their pages may be compressed)."""
    forms = {form for v in values for form in (v, json.dumps(v)[1:-1])}
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        texts = [raw.decode("utf-8", "replace")]
        if path.suffix == ".parquet":
            texts += strings(pq.read_table(path).to_pylist())
        if any(form in text for form in forms for text in texts):
            found.append(str(path.relative_to(root)))
    return found


@pytest.mark.e2e
def test_a_pattern_is_redacted_in_map_bodies_and_escaped_typed_json(personal_lake) -> None:
    """The pattern used to rewrite `body` and leave `body_type` (the same value as typed JSON)
    as it was, and to miss non-ASCII values in `attribute_types`, which hold them \\u-escaped:
    the addresses stayed in the new Parquet files."""
    lakehouse, config = personal_lake
    table = lakehouse / "logs"
    assert files_holding(table, EMAILS[0]) and files_holding(table, ACCENTED)

    result = redact_cli(config, "--pattern", EMAIL_PATTERN, "--mode", "mask")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows_affected"] == 1
    assert files_holding(table, EMAILS[0], ACCENTED) == []
    stored = DeltaTable(str(table)).to_pyarrow_table()
    (record,) = [
        r
        for resource in logs_from_arrow(stored).resource_logs
        for scope in resource.scope_logs
        for r in scope.log_records
        if r.body.HasField("kvlist_value")
    ]  # the masked row still converts back to OTLP, its types intact
    assert [(v.key, v.value.string_value) for v in record.body.kvlist_value.values] == [
        ("user", MASK)
    ]
    attributes = {a.key: a.value for a in record.attributes}
    assert [v.string_value for v in attributes["emails"].array_value.values] == [MASK]
    assert attributes["x"].string_value == SECRET  # no match: untouched


def audit_records(lakehouse: Path) -> list[dict]:
    return DeltaTable(str(lakehouse / "_audit")).to_pyarrow_table().to_pylist()


@pytest.mark.e2e
def test_an_empty_value_is_left_as_it_is(personal_lake) -> None:
    """`web`'s `x` is an empty AnyValue (NULL): hashing it failed with "TypeError: expected
    string or bytes-like object, got 'NoneType'" after `aaa` was rewritten."""
    lakehouse, config = personal_lake

    result = redact_cli(config, "--attribute", "x", "--mode", "hash")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows_affected"] == 1
    assert files_holding(lakehouse / "logs", SECRET) == []
    rows = DeltaTable(str(lakehouse / "logs")).to_pyarrow_table().to_pylist()
    x = {
        r["service_name"]: (dict(r["attributes"])["x"], dict(r["attribute_types"]).get("x"))
        for r in rows
    }
    assert x == {"aaa": (hashed(SECRET), None), "web": (None, "empty")}  # web's as it was
    assert [(r["operation"], r["rows_affected"]) for r in audit_records(lakehouse)] == [
        ("redact", 1)
    ]


@pytest.mark.e2e
def test_what_a_failed_redaction_rewrote_is_purged_and_audited(personal_lake) -> None:
    """Partitions are rewritten one by one; the purge and the audit record came only after the
    last. When `web` failed, `aaa` had been rewritten, but its old file kept SECRET, the old
    version returned it, and no record said so; a re-run found `aaa` already masked and
    purged nothing."""
    lakehouse, config = personal_lake
    table = lakehouse / "logs"
    (web,) = table.glob("service_name=web/date=*")
    before = DeltaTable(str(table)).version()

    with refusing_new_files(web):
        failed = redact_cli(config, "--pattern", r"secret-[\w-]+", "--mode", "mask")

    assert failed.returncode == 1
    # one line of ours (delta-rs's writer may print a panic of its own runtime before it)
    assert "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("otel-delta: redact failed: ")
    assert files_holding(table, SECRET) == []  # aaa: rewritten, then purged
    assert files_holding(table, WEB_SECRET)  # web: not rewritten
    with pytest.raises(Exception):  # noqa: B017 - delta-rs: the version's log entry is gone
        DeltaTable(str(table), version=before)
    (record,) = audit_records(lakehouse)
    assert (record["operation"], record["rows_affected"]) == ("redact", 1)
    assert re.search(r" \[incomplete: \w+\]$", record["predicate"]), record["predicate"]
    assert record["files_purged"] >= 1

    again = redact_cli(config, "--pattern", r"secret-[\w-]+", "--mode", "mask")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows_affected"] == 1  # web's, now
    assert files_holding(table, SECRET, WEB_SECRET) == []
