"""Bulk load of OpenTelemetry Collector file-exporter output into the tables."""

from otel_delta.backfill.run import BackfillReport, backfill, summary

__all__ = ["BackfillReport", "backfill", "summary"]
