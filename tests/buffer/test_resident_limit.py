"""`buffer.max_resident_bytes` on the bridge as users start it: over its memory limit it
answers a request that would join others with the retryable answer, lets one alone in, and
loses nothing it acknowledged."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.helpers import ServeProcess, bridge_config, read_table, table_exists, wait_until
from tests.transports.test_bad_input import span, trace_request

pytestmark = pytest.mark.e2e


def test_a_bridge_over_its_memory_limit_defers_requests_and_keeps_what_it_acked(
    tmp_path: Path,
) -> None:
    """A limit of one byte: the bridge is always over it. While the first request's rows
    cannot be committed (a file stands where the spans table goes), a second waits its retry
    delay and is answered UNAVAILABLE with RetryInfo; once the first is committed, the
    buffer is empty and the next request is let in alone."""
    config = bridge_config(
        tmp_path, "[buffer]\nmax_resident_bytes = 1\nflush_interval_seconds = 0.2\n"
    )
    server = ServeProcess(config)
    try:
        blocker = tmp_path / "lake" / "spans"  # after start: the start checks the lakehouse
        blocker.parent.mkdir(exist_ok=True)
        blocker.write_text("not a table")
        with grpc.insecure_channel(server.endpoint) as channel:
            traces = trace_service_pb2_grpc.TraceServiceStub(channel)
            traces.Export(trace_request(span("first")), timeout=30)  # alone: in the WAL
            with pytest.raises(grpc.RpcError) as err:
                traces.Export(trace_request(span("refused")), timeout=30)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "memory limit" in err.value.details()
            assert "buffer.max_resident_bytes" in err.value.details()
            trailers = dict(err.value.trailing_metadata())
            info = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
            assert info.retry_delay.seconds == 1
            metrics = server.metrics()
            assert (
                'otel_delta_receiver_refused_requests_total{reason="memory_limit",'
                'signal="traces",transport="grpc"} 1.0'
            ) in metrics
            assert "\notel_delta_buffer_max_resident_bytes 1.0\n" in metrics
            blocker.unlink()
            wait_until(
                lambda: (
                    table_exists(tmp_path / "lake", "spans")
                    and read_table(tmp_path / "lake", "spans").num_rows
                ),
                timeout=60,
                what="the acked span committed once the table can be written",
            )
            wait_until(  # the commit releases the buffer right after the table shows it
                lambda: "\notel_delta_buffer_bytes 0.0\n" in server.metrics(),
                timeout=60,
                what="the buffer empty once the span is committed",
            )
            traces.Export(trace_request(span("after")), timeout=30)
        assert server.stop() == 0
    finally:
        if server.proc.poll() is None:
            server.kill9()
    names = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(names) == ["after", "first"]
