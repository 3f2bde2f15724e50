"""receiver.native_convert: the bridge stores the same rows and answers the same with it on/off."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import grpc
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from otel_delta.config import Settings
from otel_delta.convert import native
from otel_delta.errors import ConfigError
from otel_delta.pipeline.decode import use_native
from otel_delta.signals import SIGNALS_BY_NAME
from tests import corpus
from tests.convert.test_native_parity import deep, one_span_with, random_request
from tests.helpers import LOOPBACK, RunningBridge, make_settings, read_table
from tests.transports.test_bad_input import TRACE_EXPORT, span, trace_request


def test_modes() -> None:
    assert native.available(), native.IMPORT_ERROR  # make setup builds it
    assert use_native("off") is False
    assert use_native("auto") is True
    assert use_native("on") is True


def test_on_without_the_native_module_fails_at_start_with_one_line(monkeypatch) -> None:
    monkeypatch.setattr(native, "otel_delta_native", None)  # as if it were not built
    assert use_native("auto") is False
    with pytest.raises(ConfigError) as err:
        use_native("on")
    assert "receiver.native_convert" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.e2e
def test_serve_with_native_on_but_not_built_exits_with_one_line(tmp_path) -> None:
    shadow = tmp_path / "shadow"  # an otel_delta_native that fails to import, first on the path
    shadow.mkdir()
    (shadow / "otel_delta_native.py").write_text('raise ImportError("simulated: not built")\n')
    config = tmp_path / "deltalake.toml"
    config.write_text(
        LOOPBACK + f'native_convert = "on"\n[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "receiver.native_convert" in lines[0] and "simulated: not built" in lines[0]


def run(lakehouse, mode: str, workers: int):
    settings = Settings(
        receiver={
            "grpc_endpoint": "127.0.0.1:0",
            "native_convert": mode,
            "convert_workers": workers,
        },
        # one commit per (serial) Export, as before: rows sharing a span id keep their order
        buffer={"flush_interval_seconds": 0.1, "ack": "commit"},
        deltalake={"table_path": str(lakehouse)},
        wal={"dir": str(lakehouse.parent / f"wal-{lakehouse.name}")},
    )
    bridge = RunningBridge(settings)
    answers = []
    try:
        channel = bridge.channel()
        traces, metrics, logs = bridge.stubs(channel)
        rng = random.Random(7)
        requests = [
            corpus.trace_request(),
            trace_request(span("ok"), span("bad", trace_id=b"\x01")),
            one_span_with(deep(20)),  # declined by the native side: Python converts it
            *(random_request(rng) for _ in range(6)),
        ]
        for request in requests:
            answers.append(traces.Export(request))
        logs_requests = [
            corpus.logs_request(),
            *(random_request(rng, ExportLogsServiceRequest) for _ in range(6)),
        ]
        for request in logs_requests:
            answers.append(logs.Export(request))
        metrics_requests = [
            corpus.metrics_request(),
            *(random_request(rng, ExportMetricsServiceRequest) for _ in range(6)),
        ]
        for request in metrics_requests:
            answers.append(metrics.Export(request))
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(TRACE_EXPORT)(b"\x0a\xff garbage")
        answers.append((err.value.code(), err.value.details()))
    finally:
        bridge.stop()
    stored = {name: read_table(lakehouse, name) for name in SIGNALS_BY_NAME["metrics"].tables}
    return answers, read_table(lakehouse, "spans"), read_table(lakehouse, "logs"), stored


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [0, 2])
def test_native_on_and_off_store_the_same_rows_and_answers(tmp_path, workers) -> None:
    on_answers, on_spans, on_logs, on_metrics = run(tmp_path / "on", "on", workers)
    off_answers, off_spans, off_logs, off_metrics = run(tmp_path / "off", "off", workers)
    assert on_answers == off_answers
    spans_answers = [a for a in on_answers if isinstance(a, ExportTraceServiceResponse)]
    logs_answers = [a for a in on_answers if isinstance(a, ExportLogsServiceResponse)]
    assert any(a.partial_success.rejected_spans for a in spans_answers)
    assert any(a.partial_success.rejected_log_records for a in logs_answers)
    metrics_answers = [a for a in on_answers if isinstance(a, ExportMetricsServiceResponse)]
    assert any(a.partial_success.rejected_data_points for a in metrics_answers)
    for name, table in on_metrics.items():  # no unique column either; NaN reprs as nan
        assert table.num_rows > 0, name
        assert sorted(map(repr, table.to_pylist())) == sorted(
            map(repr, off_metrics[name].to_pylist())
        ), name
    assert on_spans.num_rows > 0 and on_logs.num_rows > 0
    assert on_spans.sort_by("span_id").equals(off_spans.sort_by("span_id"))
    # logs have no unique column: compare as sets of rows (rows are dicts of plain values)
    assert sorted(map(repr, on_logs.to_pylist())) == sorted(map(repr, off_logs.to_pylist()))


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_request_that_panics_the_native_converter_gets_an_answer(tmp_path) -> None:
    """Found in black-box testing: one 64 KiB resource attribute on 33,000 spans repeated into
    more than 2 GiB of one column and the native converter panicked (about 3 GB RSS, 15 s
    here). Packed rows (tables/packed.py) hold that attribute once, so the request is stored;
    the service name, a partition column, is still repeated on every row: a 64 KiB one makes
    the converter panic, that request gets RESOURCE_EXHAUSTED and the bridge goes on serving."""

    def request_of(attribute: str, value: str) -> ExportTraceServiceRequest:
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(
            KeyValue(key=attribute, value=AnyValue(string_value=value))
        )
        spans = resource_spans.scope_spans.add().spans
        for i in range(1, 33_001):
            spans.append(
                span(f"s{i}", trace_id=i.to_bytes(16, "big"), span_id=i.to_bytes(8, "big"))
            )
        return request

    settings = make_settings(tmp_path / "lake")
    settings = settings.model_copy(
        update={"receiver": settings.receiver.model_copy(update={"native_convert": "on"})}
    )
    bridge = RunningBridge(settings)
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(request_of("big", "x" * 65536), timeout=240)
        with pytest.raises(grpc.RpcError) as err:
            traces.Export(request_of("service.name", "y" * 65536), timeout=240)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too large to convert" in err.value.details(), err.value.details()
        traces.Export(trace_request(span("after")), timeout=30)
    finally:
        bridge.stop()
    names = DeltaTable(str(tmp_path / "lake" / "spans")).to_pyarrow_table(columns=["name"])
    want = ["after", *(f"s{i}" for i in range(1, 33_001))]
    assert sorted(names["name"].to_pylist()) == sorted(want)
