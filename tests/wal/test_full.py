"""A full write-ahead log as `serve` runs it: only commits free it, so it asks for them."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.helpers import LOOPBACK, ServeProcess, read_table, wait_until
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
