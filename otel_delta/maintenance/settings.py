"""Maintenance policy from the validated settings (kept here so bridge.py only wires)."""

from __future__ import annotations

from otel_delta.config import Settings
from otel_delta.maintenance.maintainer import MaintenancePolicy
from otel_delta.maintenance.tasks import TablePolicy


def maintenance_policy(settings: Settings) -> MaintenancePolicy | None:
    """The policy `serve` runs, or None when maintenance is off (interval 0 or nothing to do)."""
    lake = settings.deltalake
    table = lake.table
    policy = TablePolicy(
        optimize=table.optimize_enabled,
        vacuum=table.vacuum_enabled,
        retention_hours=table.retention_hours,
        retention_days=table.retention_days or None,
        checkpoint=table.checkpoint_enabled,
        target_file_size=lake.storage.file_size_target,
        open_partition_age_seconds=table.open_partition_compaction_age_seconds,
        compression=table.compression,
        compaction_compression_level=table.compaction_compression_level,
        max_commit_retries=lake.operations.max_commit_retries,
        lease_seconds=table.maintenance_lease_seconds,
    )
    anything = policy.optimize or policy.vacuum or policy.retention_days or policy.checkpoint
    if not table.maintenance_interval_seconds or not anything:
        return None
    return MaintenancePolicy(
        interval_seconds=table.maintenance_interval_seconds,
        table=policy,
        settings=settings,
    )
