"""The OpenTelemetry JS SDK's own OTLP exporters as clients, over each protocol a Node service
can choose: http/json (the JS SDK's default, whose JSON encoding differs from Python's), http/
protobuf and grpc. tools/otel-js/export.js exports spans, logs and metrics once through the real
exporters (`make js-sdk` installs them from npm) and prints what the SDK recorded; every field
must come back from the tables as the SDK recorded it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import RunningBridge, read_table
from tests.tools import ROOT, js_sdk_modules

pytestmark = pytest.mark.e2e

SCRIPT = ROOT / "tools" / "otel-js" / "export.js"
TRUNCATED = ROOT / "tools" / "otel-js" / "truncated.js"
# the JS API's enums as numbers, the tables' as OTLP's names
SPAN_KINDS = ["INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"]
STATUS_CODES = ["UNSET", "OK", "ERROR"]


def _export(protocol: str, bridge: RunningBridge, service: str, script: Path = SCRIPT) -> Any:
    node = shutil.which("node")
    assert node, "node is not on PATH (the machine's Node runs the JS SDK)"
    if protocol == "grpc":
        endpoint = f"http://{bridge.endpoint}"
    else:
        assert bridge.bridge.http is not None
        endpoint = f"http://127.0.0.1:{bridge.bridge.http.port}"
    done = subprocess.run(
        [node, str(script), protocol, endpoint, service],
        env={**os.environ, "NODE_PATH": str(js_sdk_modules())},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _text(value: Any) -> str:
    """An attribute value as the tables hold it: text, arrays as compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    return None


def _assert_attributes(row: dict, prefix: str, recorded: dict[str, Any]) -> None:
    assert dict(row[f"{prefix}attributes"]) == {k: _text(v) for k, v in recorded.items()}
    types = dict(row[f"{prefix}attribute_types"] or [])
    for key, value in recorded.items():
        if isinstance(value, list):
            assert json.loads(types[key])["arrayValue"]["values"], key
        else:
            assert types.get(key) == _kind(value), key


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf", "grpc"])
def test_js_sdk_exports_land_with_every_field(
    protocol: str, bridge: RunningBridge, lakehouse: Path
) -> None:
    service = "js-" + protocol.replace("/", "-")
    sent = _export(protocol, bridge, service)

    spans = {r["span_id"]: r for r in read_table(lakehouse, "spans").to_pylist()}
    assert len(spans) == len(sent["spans"]) == 2
    for recorded in sent["spans"]:
        row = spans[recorded["span_id"]]
        assert row["service_name"] == service
        assert row["trace_id"] == recorded["trace_id"]
        assert (row["parent_span_id"] or None) == recorded["parent_span_id"]
        assert row["name"] == recorded["name"]
        assert row["kind"] == f"SPAN_KIND_{SPAN_KINDS[recorded['kind']]}"
        assert row["start_time_unix_nano"] == int(recorded["start"])
        assert row["duration_ns"] == int(recorded["end"]) - int(recorded["start"])
        assert row["status_code"] == f"STATUS_CODE_{STATUS_CODES[recorded['status']['code']]}"
        assert row["status_message"] == recorded["status"].get("message", "")
        assert [row["scope_name"], row["scope_version"]] == recorded["scope"]
        _assert_attributes(row, "", recorded["attributes"])
        assert [(e["name"], e["time_unix_nano"], dict(e["attributes"])) for e in row["events"]] == [
            (e["name"], int(e["time"]), {k: _text(v) for k, v in e["attributes"].items()})
            for e in recorded["events"]
        ]
        assert [(link["span_id"], dict(link["attributes"])) for link in row["links"]] == [
            (link["span_id"], link["attributes"]) for link in recorded["links"]
        ]
        resource = dict(row["resource_attributes"])
        assert resource["service.name"] == service
        assert resource["deployment.environment.name"] == "test"
        assert resource["process.pid"] == "4242"
        assert dict(row["resource_attribute_types"])["process.pid"] == "int"

    logs = read_table(lakehouse, "logs").to_pylist()
    assert len(logs) == len(sent["logs"]) == 2
    for row, recorded in zip(
        sorted(logs, key=lambda r: -r["severity_number"]),
        sorted(sent["logs"], key=lambda r: -r["severity_number"]),
        strict=True,
    ):
        assert row["service_name"] == service
        assert row["time_unix_nano"] == int(recorded["time"])
        assert row["observed_time_unix_nano"] == int(recorded["observed"])
        assert row["severity_number"] == recorded["severity_number"]
        assert row["severity_text"] == recorded["severity_text"]
        assert (row["trace_id"] or None) == recorded["trace_id"]
        assert (row["span_id"] or None) == recorded["span_id"]
        _assert_attributes(row, "", recorded["attributes"])
        if isinstance(recorded["body"], str):
            assert row["body"] == recorded["body"] and row["body_type"] is None
        else:  # a map body: its JSON, and its OTLP form to tell ints from doubles
            assert json.loads(row["body"]) == recorded["body"]
            assert "kvlistValue" in json.loads(row["body_type"])
    # the error log carries the context of the span it was emitted in
    [child] = [s for s in sent["spans"] if s["parent_span_id"]]
    assert any(r["span_id"] == child["span_id"] for r in logs)

    points: dict[str, dict] = {}
    for table in ("metrics_sum", "metrics_gauge", "metrics_histogram"):
        for row in read_table(lakehouse, table).to_pylist():
            assert row["service_name"] == service
            assert row["scope_name"] == "js.meter" and row["scope_version"] == "7.8.9"
            points[row["metric_name"]] = {**row, "table": table}
    assert set(points) == set(sent["metrics"])
    for name, [recorded] in sent["metrics"].items():
        row = points[name]
        assert row["start_time_unix_nano"] == int(recorded["start"])
        assert row["time_unix_nano"] == int(recorded["time"])
        _assert_attributes(row, "", recorded["attributes"])
    # JS instruments record doubles unless told otherwise
    assert points["orders.placed"]["table"] == "metrics_sum"
    assert points["orders.placed"]["value_double"] == sent["metrics"]["orders.placed"][0]["value"]
    assert points["orders.placed"]["is_monotonic"] is True
    assert points["orders.placed"]["metric_unit"] == "{order}"
    assert points["queue.depth"]["value_double"] == -2 and not points["queue.depth"]["is_monotonic"]
    assert points["cpu.temperature"]["table"] == "metrics_gauge"
    assert points["cpu.temperature"]["value_double"] == 21.5
    histogram = points["http.server.request.duration"]
    recorded = sent["metrics"]["http.server.request.duration"][0]["value"]
    assert histogram["table"] == "metrics_histogram"
    assert histogram["count"] == recorded["count"] == 1
    assert histogram["sum"] == recorded["sum"] and histogram["min"] == recorded["min"]
    assert histogram["explicit_bounds"] == recorded["buckets"]["boundaries"]
    assert histogram["bucket_counts"] == recorded["buckets"]["counts"]
    assert histogram["aggregation_temporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE"


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf", "grpc"])
def test_a_value_the_sdk_cut_inside_an_emoji_is_stored_repaired(
    protocol: str, bridge: RunningBridge, lakehouse: Path
) -> None:
    """The JS SDK's attribute length limit counts UTF-16 code units, so a cut can leave half of
    an emoji: a lone surrogate. Its protobuf exporters encode it as U+FFFD themselves; the
    http/json one sends the escape "\\ud83d", which was refused whole (400, before 2026-11-29)
    and the span dropped. Every protocol now stores U+FFFD in its place."""
    service = f"js-cut-{protocol.replace('/', '-')}"
    recorded = _export(protocol, bridge, service, TRUNCATED)
    assert recorded[0]["attributes"] == {"text": "abcd\ud83d", "plain": "ok"}
    spans = [
        row for row in read_table(lakehouse, "spans").to_pylist() if row["service_name"] == service
    ]
    assert [row["span_id"] for row in spans] == [recorded[0]["span_id"]]
    assert dict(spans[0]["attributes"]) == {"text": "abcd\ufffd", "plain": "ok"}
