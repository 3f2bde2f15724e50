"""A full write-ahead log as `serve` runs it: only commits free it, so it asks for them."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import requests
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.helpers import (
    LOOPBACK,
    RunningBridge,
    ServeProcess,
    make_settings,
    read_table,
    wait_until,
)
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e


def test_a_full_log_commits_at_once_instead_of_at_the_flush_interval(tmp_path: Path) -> None:
    """At wal.max_bytes the log refuses Exports until commits release its records; the buffer
    made those commits at its interval only, so with a long one (files sized for a day's
    queries) every Export was refused for up to that long, though one commit would free the
    log. A refusal for want of room now starts the commit, and the retries get in."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK
        + "max_receive_message_bytes = 524288\n"  # the log holds one beside a segment
        + "[buffer]\nflush_interval_seconds = 3600\n"
        + f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        + "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        + f'[wal]\ndir = "{tmp_path / "wal"}"\nmax_bytes = 1048576\nsegment_bytes = 65536\n'
    )
    server = ServeProcess(config)
    acked: list[int] = []
    refused = 0
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        padding = "x" * 20_000  # a request of some 20 KB: about 50 fill the log

        def export() -> bool:
            nonlocal refused
            i = len(acked) + refused + 1
            request = one_span_request(i)
            request.resource_spans[0].scope_spans[0].spans[0].name = f"s{i}-{padding}"
            try:
                stub.Export(request, timeout=30)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                refused += 1
                return False
            acked.append(i)
            return True

        wait_until(lambda: not export(), what="the log to fill")
        # retried, as exporters do: the refusal's commit frees the log within the interval
        wait_until(export, what="an Export to be taken after the log was full")
    finally:
        assert server.stop() == 0, "".join(server.lines)
    assert read_table(tmp_path / "lake", "spans").num_rows == len(acked)


def _request(i: int, size: int) -> bytes:
    """An OTLP/HTTP protobuf body of one span, some `size` bytes (its name)."""
    request = one_span_request(i)
    request.resource_spans[0].scope_spans[0].spans[0].name = f"s{i}-" + "x" * size
    return request.SerializeToString()


def test_a_full_log_is_ready_again_once_its_records_are_committed(tmp_path: Path) -> None:
    """A record larger than wal.segment_bytes goes whole into the newest segment, which is
    never deleted. A request refused beside it made /readyz say "full" for good, and refused
    that request for good, though the refusal's commit left nothing awaiting a commit: the
    pod stayed out of rotation and the client retried for ever. Both recover once the log's
    records are committed."""
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK
        + "max_receive_message_bytes = 1572864\n"  # 1.5 MiB: + a segment, within max_bytes
        + "[buffer]\nflush_interval_seconds = 3600\n"
        + f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        + "[deltalake.table]\nmaintenance_interval_seconds = 0\n"
        + f'[wal]\ndir = "{tmp_path / "wal"}"\nmax_bytes = 2097152\nsegment_bytes = 65536\n'
    )
    server = ServeProcess(config)
    try:
        traces = f"http://127.0.0.1:{server.http_port}/v1/traces"
        readyz = f"http://127.0.0.1:{server.admin_port}/readyz"
        headers = {"Content-Type": "application/x-protobuf"}
        first = requests.post(traces, data=_request(1, 1_200_000), headers=headers, timeout=30)
        assert first.status_code == 200, first.content
        second = _request(2, 1_200_000)  # no room beside the first until it is committed
        refused = requests.post(traces, data=second, headers=headers, timeout=30)
        assert refused.status_code == 503 and "Retry-After" in refused.headers
        # the refusal starts the commit that frees the log (flush interval: an hour)
        wait_until(
            lambda: requests.get(readyz, timeout=30).status_code == 200,
            timeout=30,
            what=f"/readyz after the commit: {requests.get(readyz, timeout=30).text}",
        )
        retried = requests.post(traces, data=second, headers=headers, timeout=30)
        assert retried.status_code == 200, retried.content
        assert requests.get(readyz, timeout=30).status_code == 200
    finally:
        assert server.stop() == 0, "".join(server.lines)
    assert read_table(tmp_path / "lake", "spans").num_rows == 2


def test_a_request_the_log_could_never_hold_is_413_and_the_bridge_stays_ready(
    tmp_path: Path,
) -> None:
    """A request over wal.max_bytes (config refuses such a log at start, so this bridge is
    built in process) is refused for good, not "full, retry later" for ever; /readyz stays
    ready, and smaller requests are taken."""
    settings = make_settings(tmp_path / "lake", ack="wal")
    wal = settings.wal.model_copy(update={"max_bytes": 1 << 20, "segment_bytes": 1 << 16})
    bridge = RunningBridge(settings.model_copy(update={"wal": wal}))
    try:
        assert bridge.bridge.http is not None and bridge.bridge.admin is not None
        traces = f"http://127.0.0.1:{bridge.bridge.http.port}/v1/traces"
        readyz = f"http://127.0.0.1:{bridge.bridge.admin.port}/readyz"
        headers = {"Content-Type": "application/x-protobuf"}
        large = requests.post(traces, data=_request(1, 3_000_000), headers=headers, timeout=30)
        assert large.status_code == 413 and "Retry-After" not in large.headers
        assert "wal.max_bytes" in large.text
        small = requests.post(traces, data=_request(2, 100), headers=headers, timeout=30)
        assert small.status_code == 200
        assert requests.get(readyz, timeout=30).status_code == 200
    finally:
        bridge.stop()
