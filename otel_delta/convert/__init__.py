"""OTLP requests → Arrow tables (and back), one module per signal."""

from otel_delta.convert.logs import logs_to_arrow
from otel_delta.convert.metrics import metrics_to_arrow
from otel_delta.convert.result import Converted, Rejections
from otel_delta.convert.spans import spans_to_arrow

__all__ = ["Converted", "Rejections", "logs_to_arrow", "metrics_to_arrow", "spans_to_arrow"]
