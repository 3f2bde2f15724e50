"""Writers commit Arrow tables to Delta: one interface, one implementation per engine."""

from otel_delta.writer.base import TableWriter
from otel_delta.writer.delta_rs import DeltaRsWriter

__all__ = ["DeltaRsWriter", "TableWriter"]
