"""Bad input gets the OTLP-specified answer, and nothing else of the request is lost."""

from __future__ import annotations

import time
import zlib

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2
from prometheus_client import REGISTRY

from otel_delta.convert.to_otlp import spans_from_arrow
from otel_delta.errors import ConfigError
from tests.helpers import (
    LOGS_EXPORT,
    RunningBridge,
    latin1_logs,
    make_settings,
    read_table,
    running_bridge,
    table_exists,
    wait_until,
)

pytestmark = pytest.mark.e2e

TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def span(name: str, trace_id: bytes = b"\x01" * 16, span_id: bytes = b"\x02" * 8, **kw):
    return trace_pb2.Span(name=name, trace_id=trace_id, span_id=span_id, **kw)


def trace_request(*spans: trace_pb2.Span) -> ExportTraceServiceRequest:
    # empty resource and scope set explicitly: what reading back from Delta gives
    scope_spans = trace_pb2.ScopeSpans(scope=InstrumentationScope(), spans=spans)
    return ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(resource=Resource(), scope_spans=[scope_spans])]
    )


def test_garbage_bytes_are_invalid_argument_and_server_lives_on(bridge, lakehouse) -> None:
    channel = bridge.channel()
    raw = channel.unary_unary(TRACE_EXPORT)  # no serializers: send bytes as they are
    with pytest.raises(grpc.RpcError) as err:
        raw(b"\xff\xff\xff\xff not a protobuf")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ExportTraceServiceRequest" in err.value.details()
    traces, _, _ = bridge.stubs(channel)
    traces.Export(trace_request(span("after")))
    assert read_table(lakehouse, "spans")["name"].to_pylist() == ["after"]


def test_a_message_asking_for_a_preset_dictionary_is_invalid_argument(bridge, lakehouse) -> None:
    """A message that looks like a zlib stream asking for a preset dictionary: zlib-ng raised
    SystemError for it, answered UNKNOWN with a traceback in the log."""
    packer = zlib.compressobj(zdict=b"service.name")
    message = packer.compress(trace_request(span("s")).SerializeToString()) + packer.flush()
    raw = bridge.channel().unary_unary(TRACE_EXPORT)
    with pytest.raises(grpc.RpcError) as err:
        raw(message)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    traces, _, _ = bridge.stubs(bridge.channel())
    traces.Export(trace_request(span("after")))
    assert read_table(lakehouse, "spans")["name"].to_pylist() == ["after"]


def test_a_call_without_a_request_message_is_invalid_argument(bridge, lakehouse) -> None:
    # Export is served as a client stream (its one message is read once the request has a
    # slot), so a client can open the call and half-close it without sending a message
    channel = bridge.channel()
    invalid = refused("invalid_request")
    empty = channel.stream_unary(TRACE_EXPORT)
    with pytest.raises(grpc.RpcError) as err:
        empty(iter(()), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no request message" in err.value.details()
    assert refused("invalid_request") == invalid + 1
    traces, _, _ = bridge.stubs(channel)
    traces.Export(trace_request(span("after")), timeout=30)
    assert read_table(lakehouse, "spans").column("name").to_pylist() == ["after"]


def test_invalid_spans_are_rejected_and_the_rest_stored(bridge, lakehouse) -> None:
    traces, _, _ = bridge.stubs(bridge.channel())
    response = traces.Export(
        trace_request(
            span("good"),
            span("short trace id", trace_id=b"\x01" * 15),
            span("zero span id", span_id=b"\x00" * 8),
            span("bad parent", parent_span_id=b"\x01" * 3),
            span("bad link", links=[trace_pb2.Span.Link(trace_id=b"\x01" * 16, span_id=b"")]),
            span("good too", span_id=b"\x03" * 8),
        )
    )
    assert response.partial_success.rejected_spans == 4
    message = response.partial_success.error_message
    assert "trace_id must be 16 bytes, got 15" in message and "all zeroes" in message
    assert sorted(read_table(lakehouse, "spans")["name"].to_pylist()) == ["good", "good too"]


def test_invalid_log_records_and_data_points_are_counted(bridge, lakehouse) -> None:
    _, metrics, logs = bridge.stubs(bridge.channel())
    response = logs.Export(
        ExportLogsServiceRequest(
            resource_logs=[
                logs_pb2.ResourceLogs(
                    scope_logs=[
                        logs_pb2.ScopeLogs(
                            log_records=[
                                logs_pb2.LogRecord(event_name="ok"),
                                logs_pb2.LogRecord(event_name="bad", span_id=b"\x01"),
                            ]
                        )
                    ]
                )
            ]
        )
    )
    assert response.partial_success.rejected_log_records == 1
    assert read_table(lakehouse, "logs")["event_name"].to_pylist() == ["ok"]

    bad_exemplar = metrics_pb2.Exemplar(trace_id=b"\x01" * 4)
    response = metrics.Export(
        ExportMetricsServiceRequest(
            resource_metrics=[
                metrics_pb2.ResourceMetrics(
                    scope_metrics=[
                        metrics_pb2.ScopeMetrics(
                            metrics=[
                                metrics_pb2.Metric(
                                    name="g",
                                    gauge=metrics_pb2.Gauge(
                                        data_points=[
                                            metrics_pb2.NumberDataPoint(as_int=1),
                                            metrics_pb2.NumberDataPoint(
                                                as_int=2, exemplars=[bad_exemplar]
                                            ),
                                        ]
                                    ),
                                ),
                                metrics_pb2.Metric(name="no data"),
                                metrics_pb2.Metric(name="no points", sum=metrics_pb2.Sum()),
                            ]
                        )
                    ]
                )
            ]
        )
    )
    assert response.partial_success.rejected_data_points == 1
    assert "'no data' has no data points" in response.partial_success.error_message
    assert "'no points' has no data points" in response.partial_success.error_message
    assert read_table(lakehouse, "metrics_gauge")["value_int"].to_pylist() == [1]


def test_strings_that_are_not_utf8_are_stored_repaired_with_a_warning(bridge, lakehouse) -> None:
    """Before 2026-11-29 the whole request was INVALID_ARGUMENT: every record lost for one."""

    def repaired() -> float:
        sample = "otel_delta_receiver_repaired_strings_total"
        return REGISTRY.get_sample_value(sample, {"signal": "logs"}) or 0.0

    before = repaired()
    export = bridge.channel().unary_unary(LOGS_EXPORT)  # bytes as they are
    response = ExportLogsServiceResponse.FromString(export(latin1_logs("latin1"), timeout=30))
    assert repaired() == before + 2
    assert response.partial_success.rejected_log_records == 0
    assert "2 string(s) were not valid UTF-8" in response.partial_success.error_message
    assert "resource_logs.scope_logs.log_records.body" in response.partial_success.error_message
    logs = read_table(lakehouse, "logs")
    assert logs.column("body").to_pylist() == ["first", "caf\ufffd", "third"]
    assert dict(logs.column("attributes").to_pylist()[1]) == {"file": "caf\ufffd"}


def test_empty_requests_succeed_and_create_nothing(bridge, lakehouse) -> None:
    traces, metrics, logs = bridge.stubs(bridge.channel())
    assert not traces.Export(ExportTraceServiceRequest()).HasField("partial_success")
    metrics.Export(ExportMetricsServiceRequest())
    logs.Export(ExportLogsServiceRequest())
    assert not table_exists(lakehouse, "spans") and not table_exists(lakehouse, "logs")


def test_huge_attribute_value_is_stored_intact(bridge, lakehouse) -> None:
    huge = "x" * (8 * 1024 * 1024) + "end"
    traces, _, _ = bridge.stubs(bridge.channel())
    traces.Export(
        trace_request(
            span("big", attributes=[KeyValue(key="blob", value=AnyValue(string_value=huge))])
        )
    )
    [row] = read_table(lakehouse, "spans").to_pylist()
    assert dict(row["attributes"])["blob"] == huge


def nest(value: AnyValue, depth: int) -> AnyValue:
    """Make `value` kvlists nested `depth` times (three message levels each), in place."""
    root = value
    for level in range(depth):
        value = value.kvlist_value.values.add(key=f"l{level}").value
    value.string_value = "leaf"
    return root


def deep_request(depth: int) -> ExportTraceServiceRequest:
    request = trace_request(span("deep"))
    nest(request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="tree").value, depth)
    return request


def test_deep_kvlist_round_trips_and_too_deep_is_invalid_argument(bridge, lakehouse) -> None:
    traces, _, _ = bridge.stubs(bridge.channel())
    request = deep_request(25)
    traces.Export(request)
    assert spans_from_arrow(read_table(lakehouse, "spans")) == request

    raw = bridge.channel().unary_unary(TRACE_EXPORT)
    with pytest.raises(grpc.RpcError) as err:
        raw(deep_request(200).SerializeToString())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MaxDepth" in err.value.details()


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_compressed_requests_are_accepted(bridge, lakehouse, compression) -> None:
    """gRPC's per-message compression, inflated by the bridge (transports/encoding.py); the
    span is large enough to be inflated on a worker thread."""
    traces, _, _ = bridge.stubs(bridge.channel(compression=compression))
    words = " ".join(f"word{i}" for i in range(40_000))  # ~370 KB, ~100 KB compressed
    zipped = span("zipped", attributes=[KeyValue(key="text", value=AnyValue(string_value=words))])
    traces.Export(trace_request(zipped))
    table = read_table(lakehouse, "spans")
    assert table["name"].to_pylist() == ["zipped"]
    assert spans_from_arrow(table) == trace_request(zipped)


def test_full_buffer_answers_unavailable_with_retry_info(lakehouse) -> None:
    """While the table cannot be committed to, acked rows stay buffered for their retry; a
    request that finds the buffer full waits the retry delay for space, then is answered
    UNAVAILABLE with RetryInfo. The acked rows land once the table can be written again."""
    bridge = RunningBridge(make_settings(lakehouse, ack="wal", max_bytes=1))
    try:
        blocker = lakehouse / "spans"  # a file where the spans table should be
        blocker.write_text("not a table")
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(trace_request(span("first")))  # durable in the write-ahead log: OK
        with pytest.raises(grpc.RpcError) as err:
            traces.Export(trace_request(span("refused")))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        trailers = dict(err.value.trailing_metadata())
        info = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
        assert info.retry_delay.seconds == 1
        assert "grpc-status-details-bin" in trailers
        blocker.unlink()
        deadline = time.monotonic() + 30  # the commit's backoff: 2 s, then 4 s
        while time.monotonic() < deadline and not (
            table_exists(lakehouse, "spans") and read_table(lakehouse, "spans").num_rows
        ):
            time.sleep(0.1)
        assert read_table(lakehouse, "spans")["name"].to_pylist() == ["first"]
    finally:
        bridge.stop()


def test_failed_commit_answers_unavailable(lakehouse) -> None:
    with running_bridge(lakehouse) as bridge:
        # after start (an unusable lakehouse is refused at start): the table cannot be created
        (lakehouse / "spans").write_text("a file where the spans table should be")
        traces, _, _ = bridge.stubs(bridge.channel())
        with pytest.raises(grpc.RpcError) as err:
            traces.Export(trace_request(span("lost")))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "commit to spans failed" in err.value.details()


def test_unwritable_lakehouse_is_refused_at_start(tmp_path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the lakehouse should be")
    with pytest.raises(ConfigError, match=r"deltalake\.table_path: cannot write"):
        RunningBridge(make_settings(blocker / "lake"))


def refused(reason: str) -> float:
    labels = {"transport": "grpc", "signal": "traces", "reason": reason}
    return REGISTRY.get_sample_value("otel_delta_receiver_refused_requests_total", labels) or 0


def test_message_over_the_receive_limit_is_refused(tmp_path) -> None:
    settings = make_settings(tmp_path)
    settings = settings.model_copy(
        update={
            "receiver": settings.receiver.model_copy(update={"max_receive_message_bytes": 1024})
        }
    )
    bridge = RunningBridge(settings)
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        big = trace_request(
            span("big", attributes=[KeyValue(key="k", value=AnyValue(string_value="v" * 4096))])
        )
        too_large, invalid = refused("request_too_large"), refused("invalid_request")
        with pytest.raises(grpc.RpcError) as err:
            traces.Export(big)
        # gRPC itself refuses the message (its max_receive_message_length); the call is
        # counted for what it was, not as a call that carried no message
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in err.value.details()
        # counted as the handler ends, which may be after gRPC answered the client
        wait_until(lambda: refused("request_too_large") == too_large + 1, what="the count")
        assert refused("invalid_request") == invalid
        # compressed under the limit, over it once inflated: the limit holds for what it holds
        zipped, _, _ = bridge.stubs(bridge.channel(compression=grpc.Compression.Gzip))
        with pytest.raises(grpc.RpcError) as err:
            zipped.Export(big)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_receive_message_bytes" in err.value.details()
        zipped.Export(trace_request(span("small")))  # the bridge serves on
    finally:
        bridge.stop()


def test_one_bad_item_does_not_fail_anyone_elses_commit(bridge, lakehouse) -> None:
    """A service.name too long for a partition directory and a year-2300 start time, sent
    concurrently with a normal span into the same commit: the normal span and the long-named
    one are stored, the out-of-range one is rejected in partial_success."""
    long_name = "svc-" + "n" * 1000
    named = trace_request(span("long-named", span_id=b"\x03" * 8))
    named.resource_spans[0].resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value=long_name))
    )
    far_future = trace_request(span("year-2300", span_id=b"\x04" * 8, start_time_unix_nano=2**63))
    traces, _, _ = bridge.stubs(bridge.channel())
    futures = [
        traces.Export.future(request)
        for request in (trace_request(span("normal")), named, far_future)
    ]
    answers = [f.result(timeout=30) for f in futures]
    assert not answers[0].HasField("partial_success")
    assert not answers[1].HasField("partial_success")
    assert answers[2].partial_success.rejected_spans == 1
    assert "2^63" in answers[2].partial_success.error_message
    rows = {r["name"]: r for r in read_table(lakehouse, "spans").to_pylist()}
    assert set(rows) == {"normal", "long-named"}
    assert dict(rows["long-named"]["resource_attributes"])["service.name"] == long_name
    assert rows["long-named"]["service_name"].startswith("svc-nnn")
