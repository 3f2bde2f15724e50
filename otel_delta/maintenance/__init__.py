"""Scheduled table maintenance run beside ingestion by `serve`."""

from otel_delta.maintenance.maintainer import Maintainer, MaintenancePolicy, RoundReport
from otel_delta.maintenance.tasks import maintain_table

__all__ = ["Maintainer", "MaintenancePolicy", "RoundReport", "maintain_table"]
