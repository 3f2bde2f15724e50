"""OTLP → Arrow → OTLP must give back exactly the input: nothing is lost in flattening."""

from __future__ import annotations

from google.protobuf import text_format

from otel_delta.convert import logs_to_arrow, metrics_to_arrow, spans_to_arrow
from otel_delta.convert.to_otlp import logs_from_arrow, metrics_from_arrow, spans_from_arrow
from tests import corpus


def assert_same(actual, expected) -> None:
    # text_format gives a readable diff when a field is lost
    assert text_format.MessageToString(actual) == text_format.MessageToString(expected)
    assert actual == expected


def test_spans_round_trip() -> None:
    request = corpus.trace_request()
    converted = spans_to_arrow(request)
    assert converted.rejected.count == 0
    assert_same(spans_from_arrow(converted.tables["spans"]), request)


def test_logs_round_trip() -> None:
    request = corpus.logs_request()
    converted = logs_to_arrow(request)
    assert_same(logs_from_arrow(converted.tables["logs"]), request)


def test_metrics_round_trip_all_five_types() -> None:
    request = corpus.metrics_request()
    converted = metrics_to_arrow(request)
    assert set(converted.tables) == {
        "metrics_gauge",
        "metrics_sum",
        "metrics_histogram",
        "metrics_exponential_histogram",
        "metrics_summary",
    }
    assert_same(metrics_from_arrow(converted.tables), request)
