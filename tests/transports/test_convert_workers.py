"""receiver.convert_workers: decoding in worker processes gives the same answers and rows."""

from __future__ import annotations

import grpc
import pytest

from otel_delta.convert.to_otlp import metrics_from_arrow
from otel_delta.tables import TABLES
from tests import corpus
from tests.helpers import RunningBridge, make_settings, read_table
from tests.transports.test_bad_input import TRACE_EXPORT, span, trace_request

pytestmark = pytest.mark.e2e


def test_worker_processes_store_the_same_rows_and_reject_the_same_input(lakehouse) -> None:
    bridge = RunningBridge(make_settings(lakehouse, convert_workers=2))
    try:
        channel = bridge.channel()
        traces, metrics, _ = bridge.stubs(channel)
        metrics.Export(corpus.metrics_request())
        response = traces.Export(trace_request(span("ok"), span("bad", trace_id=b"\x01")))
        assert response.partial_success.rejected_spans == 1
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(TRACE_EXPORT)(b"\x0a\xff garbage")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        bridge.stop()
    tables = {n: read_table(lakehouse, n) for n in TABLES if n.startswith("metrics_")}
    assert metrics_from_arrow(tables) == corpus.metrics_request()
    assert read_table(lakehouse, "spans")["name"].to_pylist() == ["ok"]
