"""The admin endpoint as an operator and Prometheus use it, and readiness under a real failure:
the table's log replaced by a file, so that every commit fails until it is put back."""

from __future__ import annotations

import shutil

import grpc
import pytest
import requests
from deltalake import DeltaTable
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from otel_delta.convert import spans_to_arrow
from otel_delta.engines import DeltaRsEngine
from otel_delta.lakehouse import Lakehouse
from otel_delta.tables.versions import SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY
from tests import corpus
from tests.helpers import RunningBridge, make_settings, read_table, wait_until

pytestmark = pytest.mark.e2e


def admin(bridge: RunningBridge, path: str) -> requests.Response:
    assert bridge.bridge.admin is not None
    return requests.get(f"http://127.0.0.1:{bridge.bridge.admin.port}{path}", timeout=30)


def samples(bridge: RunningBridge) -> dict[tuple[str, tuple], float]:
    answer = admin(bridge, "/metrics")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def test_health_readiness_and_metrics(tmp_path) -> None:
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse, ack="wal", flush_interval_seconds=0.2))
    try:
        assert admin(bridge, "/healthz").status_code == 200
        ready = admin(bridge, "/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True
        assert {c["name"] for c in ready.json()["checks"]} == {"receiver", "wal", "commits"}

        before = samples(bridge)
        traces, _, logs = bridge.stubs(bridge.channel())
        for _ in range(3):
            traces.Export(corpus.trace_request())
        logs.Export(corpus.logs_request())
        garbage = bridge.channel().unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        )
        with pytest.raises(grpc.RpcError):
            garbage(b"\xff\xff\xff", timeout=30)
        wait_until(
            lambda: samples(bridge).get(("otel_delta_wal_pending_records", ())) == 0, timeout=30.0
        )
        after = samples(bridge)

        def grew(name: str, **labels: str) -> float:
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0.0) - before.get(key, 0.0)

        requests_key = {"transport": "grpc", "signal": "traces", "outcome": "accepted"}
        assert grew("otel_delta_receiver_requests_total", **requests_key) == 3
        assert grew("otel_delta_receiver_accepted_items_total", signal="traces") == 12
        refused = {"transport": "grpc", "signal": "traces", "reason": "invalid_request"}
        assert grew("otel_delta_receiver_refused_requests_total", **refused) == 1
        assert (
            grew("otel_delta_receiver_accepted_items_total", signal="logs")
            == read_table(lakehouse, "logs").num_rows
        )
        assert grew("otel_delta_commit_rows_total", table="spans") == 12
        assert grew("otel_delta_wal_fsyncs_total") >= 1
        assert after[("otel_delta_ready", ())] == 1
        assert after[("otel_delta_wal_segments", ())] >= 1
        histogram = (
            "otel_delta_receiver_export_duration_seconds_count",
            tuple(sorted({"transport": "grpc", "signal": "traces"}.items())),
        )
        assert after[histogram] - before.get(histogram, 0) == 4  # the refused one too
        # each stage once per request that got through it: the garbage one failed to decode
        stages = {
            stage: grew(
                "otel_delta_receiver_export_stage_duration_seconds_count",
                signal="traces",
                stage=stage,
            )
            for stage in ("slot", "receive", "convert", "log", "commit")
        }
        assert stages == {"slot": 4, "receive": 4, "convert": 3, "log": 3, "commit": 0}
        stage_seconds = grew(
            "otel_delta_receiver_export_stage_duration_seconds_sum", signal="traces", stage="log"
        )
        assert stage_seconds > 0
        assert ("process_resident_memory_bytes", ()) in after
    finally:
        bridge.stop()


def test_readiness_follows_failing_commits(tmp_path) -> None:
    """Commits that fail for longer than admin.commit_failure_seconds make /readyz 503 and the
    gRPC health service NOT_SERVING; when storage recovers, both return; nothing is lost."""
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(
        make_settings(
            lakehouse,
            ack="wal",
            admin={"commit_failure_seconds": 0.5},
            flush_interval_seconds=0.2,
        )
    )
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        health = health_pb2_grpc.HealthStub(bridge.channel())
        traces.Export(corpus.trace_request())
        wait_until(lambda: (lakehouse / "spans" / "_delta_log").is_dir(), timeout=30.0)
        log_dir = lakehouse / "spans" / "_delta_log"
        moved = tmp_path / "delta_log_aside"
        wait_until(lambda: read_table(lakehouse, "spans").num_rows == 4, timeout=30.0)
        shutil.move(log_dir, moved)
        log_dir.write_text("not a directory")  # storage broken: every commit fails

        traces.Export(corpus.trace_request())  # acked by the WAL; its commit will fail
        wait_until(lambda: admin(bridge, "/readyz").status_code == 503, timeout=30.0)

        def commits() -> dict:
            return next(
                c for c in admin(bridge, "/readyz").json()["checks"] if c["name"] == "commits"
            )

        # while the first commit still retries: "a commit has been running for …"; then:
        wait_until(lambda: "failing for" in commits()["detail"], timeout=30.0)
        assert commits()["ok"] is False
        wait_until(
            lambda: (
                health.Check(health_pb2.HealthCheckRequest()).status
                == health_pb2.HealthCheckResponse.NOT_SERVING
            ),
            timeout=30.0,
        )
        assert samples(bridge)[("otel_delta_commit_failures_total", (("table", "spans"),))] >= 1

        log_dir.unlink()
        shutil.move(moved, log_dir)  # storage back: the held group commits on its next retry
        wait_until(lambda: admin(bridge, "/readyz").status_code == 200, timeout=60.0)
        wait_until(
            lambda: (
                health.Check(health_pb2.HealthCheckRequest()).status
                == health_pb2.HealthCheckResponse.SERVING
            ),
            timeout=30.0,
        )
    finally:
        bridge.stop()
    assert read_table(lakehouse, "spans").num_rows == 8


def test_readiness_names_a_table_of_a_newer_schema_version(tmp_path) -> None:
    """After a downgrade, a table a newer otel-delta created takes none of this bridge's
    commits, and no retry will change that: /readyz names the table and the reason (where a
    probe's answer is seen without the log), and the rows wait in the write-ahead log."""
    lakehouse = tmp_path / "lake"
    DeltaRsEngine(Lakehouse(str(lakehouse))).append(
        "spans", spans_to_arrow(corpus.trace_request()).tables["spans"]
    )
    newer = SCHEMA_VERSION + 1
    spans = DeltaTable(str(lakehouse / "spans"))
    spans.alter.set_table_properties(
        {SCHEMA_VERSION_PROPERTY: str(newer)}, raise_if_not_exists=False
    )
    version = spans.version()
    bridge = RunningBridge(
        make_settings(
            lakehouse, ack="wal", admin={"commit_failure_seconds": 0.5}, flush_interval_seconds=0.2
        )
    )
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(corpus.trace_request())  # acked by the WAL; its commit is refused
        wait_until(lambda: admin(bridge, "/readyz").status_code == 503, timeout=30.0)
        checks = {c["name"]: c for c in admin(bridge, "/readyz").json()["checks"]}
        assert checks["commits"]["detail"].endswith(
            f"(spans: table spans has schema version {newer}, newer than this bridge's "
            f"{SCHEMA_VERSION}: upgrade otel-delta)"
        )
        assert bridge.bridge.wal is not None and bridge.bridge.wal.pending_records == 1
    finally:
        bridge.stop()
    assert DeltaTable(str(lakehouse / "spans")).version() == version


def test_admin_endpoint_can_be_turned_off(tmp_path) -> None:
    bridge = RunningBridge(make_settings(tmp_path / "lake", admin={"endpoint": ""}))
    try:
        assert bridge.bridge.admin is None
        with pytest.raises(grpc.RpcError):  # sanity: the OTLP port is not the admin endpoint
            health_pb2_grpc.HealthStub(bridge.channel()).Check(
                health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5
            )
    finally:
        bridge.stop()


def test_readiness_fails_while_the_write_ahead_log_refuses_requests(tmp_path) -> None:
    """The WAL refuses a request that would take it past `wal.max_bytes` (UNAVAILABLE, retry
    later) before its bytes on disk reach that bound: /readyz must say so from the first
    refusal, not only at the bound, or a load balancer keeps sending a bridge traffic it
    refuses. Commits fail meanwhile (the table's log is a file), but not for long enough to
    fail the `commits` check; once storage is back, they free the log and it is ready again."""
    lakehouse = tmp_path / "lake"
    settings = make_settings(lakehouse, ack="wal", flush_interval_seconds=0.2)
    wal = settings.wal.model_copy(update={"max_bytes": 1 << 20, "segment_bytes": 1 << 18})
    bridge = RunningBridge(settings.model_copy(update={"wal": wal}))
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(corpus.trace_request())
        log_dir = lakehouse / "spans" / "_delta_log"
        wait_until(log_dir.is_dir, timeout=30.0)
        wait_until(lambda: read_table(lakehouse, "spans").num_rows == 4, timeout=30.0)
        moved = tmp_path / "delta_log_aside"
        shutil.move(log_dir, moved)
        log_dir.write_text("not a directory")  # every commit fails: the log only grows

        request = corpus.trace_request()
        request.resource_spans[0].scope_spans[0].spans[0].name = "x" * 300_000
        refused = None
        for _ in range(8):
            try:
                traces.Export(request, timeout=30)
            except grpc.RpcError as error:
                refused = error
                break
        assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE
        ready = admin(bridge, "/readyz")
        checks = {c["name"]: c for c in ready.json()["checks"]}
        assert ready.status_code == 503 and checks["wal"]["ok"] is False
        assert checks["wal"]["detail"].startswith("full:")
        assert checks["commits"]["ok"] is True  # the WAL alone makes it not ready
        assert bridge.bridge.wal is not None
        assert bridge.bridge.wal.disk_bytes < bridge.bridge.wal.max_bytes

        log_dir.unlink()
        shutil.move(moved, log_dir)
        wait_until(lambda: admin(bridge, "/readyz").status_code == 200, timeout=60.0)
    finally:
        bridge.stop()
