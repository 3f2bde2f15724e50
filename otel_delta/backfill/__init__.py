"""Bulk load of OpenTelemetry Collector file-exporter output into the tables.

Entry point: `otel_delta.backfill.run.backfill`. This package init imports nothing, so Spark's
Python workers load only the modules their tasks need.
"""
