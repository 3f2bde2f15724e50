"""The OpenTelemetry Java SDK's own OTLP exporters as clients, as a Java service runs them (batch
span and log processors, a periodic metric reader; OkHttp under both the grpc and the
http/protobuf exporter, with the SDK's own retry policy), against `otel-delta serve` as users
start it (the default `ack = "wal"`). tools/java-sdk/Export.java (`make java-sdk` builds it)
exports a bounded run of spans, logs and metrics and prints what the SDK handed its exporters;
every item must come back from the tables once, every field as the SDK recorded it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.certs import make_certs
from tests.helpers import ServeProcess, bridge_config, read_table
from tests.tools import java_sdk_classpath

pytestmark = pytest.mark.e2e

TRACES = 300  # 600 spans: more than one batch of the BatchSpanProcessor (512)
TOKEN = "java-sdk-test-token-0123456789"
# the SDK's attribute types as the tables record them (strings have no entry)
SCALAR_TYPES = {"LONG": "int", "DOUBLE": "double", "BOOLEAN": "bool"}
# the SDK's metric types and the tables that hold them
METRIC_TABLES = {
    "LONG_SUM": "metrics_sum",
    "DOUBLE_GAUGE": "metrics_gauge",
    "HISTOGRAM": "metrics_histogram",
    "EXPONENTIAL_HISTOGRAM": "metrics_exponential_histogram",
}
ARRAY_VALUES = {
    "STRING_ARRAY": "stringValue",
    "LONG_ARRAY": "intValue",
    "DOUBLE_ARRAY": "doubleValue",
    "BOOLEAN_ARRAY": "boolValue",
}


def _export(protocol: str, endpoint: str, service: str, *flags: str) -> subprocess.CompletedProcess:
    java = shutil.which("java")
    assert java, "java is not on PATH (the machine's Java 17 runs the Java SDK)"
    return subprocess.run(
        [java, "-cp", java_sdk_classpath(), "Export", protocol, endpoint, service, *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _sent(done: subprocess.CompletedProcess) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _endpoint(serve: ServeProcess, protocol: str, scheme: str = "http") -> str:
    port = serve.port if protocol == "grpc" else serve.http_port
    return f"{scheme}://127.0.0.1:{port}"


def _text(value: Any) -> str:
    """An attribute value as the tables hold it: text, arrays and maps as compact JSON, bytes
    in base64 (as the program prints them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _plain(value: dict) -> Any:
    """An OTLP/JSON AnyValue as plain JSON (ints as ints, so that types can be compared)."""
    [(kind, inner)] = value.items()
    if kind == "kvlistValue":
        return {kv["key"]: _plain(kv["value"]) for kv in inner.get("values", [])}
    if kind == "arrayValue":
        return [_plain(item) for item in inner.get("values", [])]
    return int(inner) if kind == "intValue" else inner


def _assert_attributes(row: dict, prefix: str, recorded: dict[str, dict]) -> None:
    """`recorded`: {key: {"type": the SDK's AttributeType, "value": ...}}."""
    assert dict(row[f"{prefix}attributes"]) == {k: _text(a["value"]) for k, a in recorded.items()}
    types = dict(row[f"{prefix}attribute_types"] or [])
    for key, attribute in recorded.items():
        kind = attribute["type"]
        if kind in ARRAY_VALUES:
            values = json.loads(types[key])["arrayValue"]["values"]
            assert [list(v) for v in values] == [[ARRAY_VALUES[kind]]] * len(attribute["value"])
        elif kind == "VALUE" and isinstance(attribute["value"], str):
            assert types[key] == "bytes", key
        elif kind == "VALUE":  # a map: its OTLP form keeps the types of its values
            typed = _plain(json.loads(types[key]))
            assert json.dumps(typed) == json.dumps(attribute["value"]), key
        else:
            assert types.get(key) == SCALAR_TYPES.get(kind), key


def _assert_stored(lake: Path, service: str, sent: dict[str, Any]) -> None:
    rows = [r for r in read_table(lake, "spans").to_pylist() if r["service_name"] == service]
    assert len(rows) == len(sent["spans"]) == 2 * TRACES
    assert not [k for k, n in Counter(r["span_id"] for r in rows).items() if n > 1]
    spans = {r["span_id"]: r for r in rows}
    for recorded in sent["spans"]:
        row = spans[recorded["span_id"]]
        assert row["trace_id"] == recorded["trace_id"]
        assert (row["parent_span_id"] or None) == recorded["parent_span_id"]
        assert row["name"] == recorded["name"]
        assert row["kind"] == f"SPAN_KIND_{recorded['kind']}"
        assert row["start_time_unix_nano"] == recorded["start"]
        assert row["duration_ns"] == recorded["end"] - recorded["start"]
        assert row["status_code"] == f"STATUS_CODE_{recorded['status']}"
        assert row["status_message"] == recorded["status_message"]
        assert [row["scope_name"], row["scope_version"]] == recorded["scope"]
        _assert_attributes(row, "", recorded["attributes"])
        _assert_attributes(row, "resource_", recorded["resource"])
        assert len(row["events"]) == len(recorded["events"])
        for event, sent_event in zip(row["events"], recorded["events"], strict=True):
            assert (event["name"], event["time_unix_nano"]) == (
                sent_event["name"],
                sent_event["time"],
            )
            _assert_attributes(event, "", sent_event["attributes"])
        assert len(row["links"]) == len(recorded["links"])
        for link, sent_link in zip(row["links"], recorded["links"], strict=True):
            assert (link["trace_id"], link["span_id"]) == (
                sent_link["trace_id"],
                sent_link["span_id"],
            )
            _assert_attributes(link, "", sent_link["attributes"])

    logs = read_table(lake, "logs").to_pylist()
    logs = sorted(
        (r for r in logs if r["service_name"] == service), key=lambda r: r["time_unix_nano"]
    )
    assert len(logs) == len(sent["logs"]) == 2
    for row, recorded in zip(logs, sorted(sent["logs"], key=lambda r: r["time"]), strict=True):
        assert row["time_unix_nano"] == recorded["time"]
        assert row["observed_time_unix_nano"] == recorded["observed"]
        assert row["severity_number"] == recorded["severity_number"]
        assert row["severity_text"] == recorded["severity_text"]
        assert row["event_name"] == (recorded["event_name"] or "")
        assert (row["trace_id"] or None) == recorded["trace_id"]
        assert (row["span_id"] or None) == recorded["span_id"]
        assert row["scope_name"] == recorded["scope"]
        _assert_attributes(row, "", recorded["attributes"])
        if isinstance(recorded["body"], str):
            assert row["body"] == recorded["body"] and row["body_type"] is None
        else:  # a map body: its JSON, and its OTLP form to tell ints from doubles
            assert json.loads(row["body"]) == recorded["body"]
            assert "kvlistValue" in json.loads(row["body_type"])
    # the error log carries the context of the first child span
    assert logs[0]["span_id"] in spans and spans[logs[0]["span_id"]]["parent_span_id"]

    points: dict[str, dict] = {}
    for table in METRIC_TABLES.values():
        for row in read_table(lake, table).to_pylist():
            if row["service_name"] == service:
                assert row["metric_name"] not in points, "a point stored twice"
                points[row["metric_name"]] = {**row, "table": table}
    assert sorted(points) == sorted(p["name"] for p in sent["metrics"])
    assert len(sent["metrics"]) == 4
    for recorded in sent["metrics"]:
        row = points[recorded["name"]]
        assert row["table"] == METRIC_TABLES[recorded["type"]]
        assert row["scope_name"] == recorded["scope"] and row["scope_version"] == "7.8.9"
        assert row["metric_unit"] == recorded["unit"]
        assert row["start_time_unix_nano"] == recorded["start"]
        assert row["time_unix_nano"] == recorded["time"]
        _assert_attributes(row, "", recorded["attributes"])
        if "temporality" in recorded:
            temporality = f"AGGREGATION_TEMPORALITY_{recorded['temporality']}"
            assert row["aggregation_temporality"] == temporality
        if "value" in recorded:  # Java's counters count in longs, its gauges in doubles
            value = "value_int" if recorded["type"].startswith("LONG") else "value_double"
            assert row[value] == recorded["value"] is not None
        if "monotonic" in recorded:
            assert row["is_monotonic"] is recorded["monotonic"]
        for field in ("count", "sum", "min", "max", "scale", "zero_count"):
            assert row.get(field) == recorded.get(field, row.get(field)), field
        if recorded["type"] == "HISTOGRAM":
            assert row["explicit_bounds"] == recorded["bounds"]
            assert row["bucket_counts"] == recorded["counts"]
        for side in ("positive", "negative"):
            if side in recorded:
                buckets = recorded[side]
                assert row[side] == {
                    "offset": buckets["offset"],
                    "bucket_counts": buckets["counts"],
                }
        assert len(row["exemplars"]) == len(recorded["exemplars"])
        for exemplar, sent_exemplar in zip(row["exemplars"], recorded["exemplars"], strict=True):
            assert exemplar["time_unix_nano"] == sent_exemplar["time"]
            assert (exemplar["trace_id"], exemplar["span_id"]) == (
                sent_exemplar["trace_id"],
                sent_exemplar["span_id"],
            )
            value = "value_int" if isinstance(sent_exemplar["value"], int) else "value_double"
            assert exemplar[value] == sent_exemplar["value"]
            _assert_attributes(exemplar, "filtered_", sent_exemplar["attributes"])
    # the points recorded in the first child span carry it as their exemplar
    exemplified = {p["name"] for p in sent["metrics"] if p["exemplars"]}
    assert exemplified == {
        "orders.placed",
        "http.server.request.duration",
        "db.client.operation.duration",
    }
    assert points["db.client.operation.duration"]["zero_count"] == 1


@pytest.mark.parametrize(
    "protocol, flags",
    [("grpc", ()), ("http/protobuf", ("--gzip",)), ("grpc", ("--immutable-data",))],
    # the exporters' default REUSABLE_DATA marshals through other code than IMMUTABLE_DATA
    ids=["grpc", "http-protobuf-gzip", "grpc-immutable-data"],
)
def test_java_sdk_exports_land_once_with_every_field(
    protocol: str, flags: tuple[str, ...], tmp_path: Path
) -> None:
    serve = ServeProcess(bridge_config(tmp_path))
    try:
        sent = _sent(
            _export(protocol, _endpoint(serve, protocol), "java", "--traces", str(TRACES), *flags)
        )
    finally:
        assert serve.stop() == 0, "".join(serve.lines)
    _assert_stored(tmp_path / "lake", "java", sent)


def test_java_sdk_over_mtls_with_a_token(tmp_path: Path) -> None:
    """mTLS (the SDK's trusted certificates, its client key and certificate) and the bearer
    token in a header, as the Java exporters send them over each protocol (gzip'd over gRPC);
    a wrong or missing token is refused and the exporter says why; a client certificate of
    another CA fails the handshake. Each refused program fails and nothing of it is stored."""
    certs = make_certs(tmp_path / "certs")
    config = bridge_config(
        tmp_path,
        f'[receiver.tls]\ncert_file = "{certs.server_cert}"\nkey_file = "{certs.server_key}"\n'
        f'client_ca_file = "{certs.ca}"\n[receiver.auth]\ntoken_env = "JAVA_SDK_TOKEN"\n',
    )
    serve = ServeProcess(config, env={"JAVA_SDK_TOKEN": TOKEN})
    tls = ("--ca", str(certs.ca), "--client-cert", str(certs.client_cert))
    tls += ("--client-key", str(certs.client_key))
    stranger = ("--ca", str(certs.ca), "--client-cert", str(certs.other_client_cert))
    stranger += ("--client-key", str(certs.other_client_key))
    sent: dict[str, Any] = {}
    try:
        grpc, http = _endpoint(serve, "grpc", "https"), _endpoint(serve, "http/protobuf", "https")
        for protocol, endpoint, service, flags in [
            ("grpc", grpc, "java-grpc", ("--gzip", "--token", TOKEN)),
            ("http/protobuf", http, "java-http", ("--token", TOKEN)),
        ]:
            sent[service] = _sent(
                _export(protocol, endpoint, service, "--traces", str(TRACES), *flags, *tls)
            )
        wrong = _export("grpc", grpc, "intruder", "--token", "x", *tls)
        missing = _export("http/protobuf", http, "intruder", *tls)
        # refused after the handshake (TLS 1.3), which the exporter retries until its timeout
        unknown = _export(
            "http/protobuf", http, "intruder", "--token", TOKEN, *stranger, "--no-retry"
        )
    finally:
        assert serve.stop() == 0, "".join(serve.lines)
    assert wrong.returncode == 1 and "gRPC status code 16" in wrong.stderr, wrong.stderr
    assert missing.returncode == 1 and "HTTP status code 401" in missing.stderr, missing.stderr
    assert unknown.returncode == 1 and "export failed" in unknown.stderr, unknown.stderr
    for service, recorded in sent.items():
        _assert_stored(tmp_path / "lake", service, recorded)
    for table in ("spans", "logs", "metrics_sum"):
        assert "intruder" not in {
            r["service_name"] for r in read_table(tmp_path / "lake", table).to_pylist()
        }


def test_java_sdk_exports_are_answered_in_time_with_ack_commit(tmp_path: Path) -> None:
    """`ack = "commit"` as a user sets it, the flush interval left alone: every Export waits
    for its commit, and each must be answered within the Java exporters' timeouts (10 s; 5 s
    for the meter provider's last export at shutdown). With the WAL mode's 10 s interval, the
    logs sent right after the spans' answer waited about 10 s and the metrics after them timed
    out ("Socket closed"), the program failing though the bridge stored them."""
    serve = ServeProcess(bridge_config(tmp_path, '[buffer]\nack = "commit"\n'))
    try:
        done = _export(
            "http/protobuf", _endpoint(serve, "http/protobuf"), "java", "--traces", str(TRACES)
        )
        sent = _sent(done)
        _assert_stored(tmp_path / "lake", "java", sent)  # an OK meant committed
    finally:
        assert serve.stop() == 0, "".join(serve.lines)


def _refused(serve: ServeProcess, transport: str, reason: str) -> float:
    """The bridge's count of whole Exports of spans it refused for `reason` (admin /metrics)."""
    text = serve.metrics()
    labels = f'reason="{reason}",signal="traces",transport="{transport}"'
    found = re.search(
        rf"^otel_delta_receiver_refused_requests_total\{{{labels}\}} (\S+)$", text, re.M
    )
    return float(found[1]) if found else 0.0


def test_java_sdk_retries_an_oversized_request_over_grpc_only(tmp_path: Path) -> None:
    """What the README says of a batch over `receiver.max_receive_message_bytes`: the bridge
    answers RESOURCE_EXHAUSTED without RetryInfo over gRPC (gRPC's own check) and 413 over
    HTTP, both final by the OTLP specification; the Java gRPC exporter retries
    RESOURCE_EXHAUSTED all the same (sending the batch again until its timeout), the HTTP
    exporter does not retry 413. Either way the program fails and the batch is lost."""
    config = bridge_config(tmp_path)
    limit = 'http_endpoint = "127.0.0.1:0"\n'
    config.write_text(
        config.read_text().replace(limit, f"{limit}max_receive_message_bytes = 30000\n")
    )
    serve = ServeProcess(config)
    try:
        for protocol in ("grpc", "http/protobuf"):
            done = _export(protocol, _endpoint(serve, protocol), "java", "--traces", "100")
            assert done.returncode == 1, done.stderr
        grpc_refused = _refused(serve, "grpc", "request_too_large")
        http_refused = _refused(serve, "http", "request_too_large")
    finally:
        assert serve.stop() == 0, "".join(serve.lines)
    # 200 spans: one batch, about 60 KB
    assert grpc_refused > 1, "the Java gRPC exporter sent the oversized batch once"
    assert http_refused == 1
    assert read_table(tmp_path / "lake", "logs").num_rows == 4  # the small batches landed
