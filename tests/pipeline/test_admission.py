"""Admission rules: out-of-range partition times are rejected, over-long partition values are
shortened with a hash — with both converters' output."""

from __future__ import annotations

from urllib.parse import quote

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta.pipeline.admission import MAX_ENCODED_PARTITION_VALUE, shorten
from otel_delta.signals import SIGNALS_BY_NAME
from tests.helpers import decode_once

PARTITION_BY = ("service_name", "date")


def request(*services_and_starts: tuple[str, int]) -> ExportTraceServiceRequest:
    out = ExportTraceServiceRequest()
    for i, (service, start) in enumerate(services_and_starts, start=1):
        out.resource_spans.append(
            trace_pb2.ResourceSpans(
                resource=Resource(
                    attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))]
                ),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        spans=[
                            trace_pb2.Span(
                                trace_id=i.to_bytes(16, "big"),
                                span_id=i.to_bytes(8, "big"),
                                name=f"s{i}",
                                start_time_unix_nano=start,
                                end_time_unix_nano=min(start + 1000, 2**64 - 1),
                            )
                        ]
                    )
                ],
            )
        )
    return out


def converted(req: ExportTraceServiceRequest, native: bool):
    return decode_once(SIGNALS_BY_NAME["traces"], req.SerializeToString(), native, PARTITION_BY)


def test_partition_time_at_or_after_2_63_is_rejected_not_misfiled() -> None:
    now = 1_763_900_000_000_000_000
    for native in (False, True):
        result = converted(request(("a", now), ("b", 2**63), ("c", 2**64 - 1)), native)
        spans = result.tables["spans"]
        assert spans.column("name").to_pylist() == ["s1"], native
        assert result.rejected.count == 2
        assert "2^63" in result.rejected.error_message


def test_a_request_with_only_out_of_range_items_has_no_rows() -> None:
    result = converted(request(("a", 2**63 + 5)), native=False)
    assert result.tables == {} and result.rejected.count == 1


def test_long_partition_values_are_shortened_distinctly_and_kept_in_full() -> None:
    long_a = "checkout-" + "x" * 400 + "-a"
    long_b = "checkout-" + "x" * 400 + "-b"  # the same prefix: still two partitions
    accented = "é" * 150  # 300 UTF-8 bytes, 900 once percent-encoded
    for native in (False, True):
        spans = converted(
            request(("short", 10**18), (long_a, 10**18), (long_b, 10**18), (accented, 10**18)),
            native,
        ).tables["spans"]
        names = spans.column("service_name").to_pylist()
        assert names[0] == "short"
        assert len(set(names)) == 4
        for value in names:
            assert len(quote(value, safe="")) <= MAX_ENCODED_PARTITION_VALUE
        assert names[1].startswith("checkout-xxx") and "~" in names[1]
        full = [dict(r)["service.name"] for r in spans.column("resource_attributes").to_pylist()]
        assert full == ["short", long_a, long_b, accented]
    assert shorten("fine") == "fine"
    assert shorten(long_a) == shorten(long_a)  # stable across requests and restarts


def test_a_packed_partition_column_is_plain_and_shortened() -> None:
    """`partition_by` may name a column the native converter packs (tables/packed.py):
    admission makes it plain, so its values are checked and shortened like any other."""
    req = request(("a", 10**18), ("b", 10**18))
    long_scope = "lib-" + "y" * 400
    for i, resource_spans in enumerate(req.resource_spans):
        resource_spans.scope_spans[0].scope.name = long_scope if i else "short-lib"
    partition_by = ("service_name", "scope_name", "date")
    for native in (False, True):
        raw = req.SerializeToString()
        spans = decode_once(SIGNALS_BY_NAME["traces"], raw, native, partition_by).tables["spans"]
        assert spans.schema.field("scope_name").type == "string", native
        names = spans.column("scope_name").to_pylist()
        assert names[0] == "short-lib" and names[1].startswith("lib-yyy") and "~" in names[1]
        assert len(quote(names[1], safe="")) <= MAX_ENCODED_PARTITION_VALUE
