"""The connector's table catalogue, configuration and concurrency errors."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.config import Settings
from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.engines import DeltaRsEngine
from otel_delta.errors import (
    ConcurrentModificationError,
    ConfigError,
    OtelDeltaError,
    TableNotFoundError,
)
from otel_delta.lakehouse import Lakehouse
from otel_delta.tables import TABLES
from tests.helpers import make_settings

pytestmark = pytest.mark.e2e  # tables written by a real bridge (gRPC server)


def test_top_level_import_and_config_from_toml(tmp_path: Path) -> None:
    from otel_delta import DeltaConfig as TopConfig
    from otel_delta import DeltaLakeConnector as TopConnector

    assert TopConfig is DeltaConfig and TopConnector is DeltaLakeConnector
    toml = tmp_path / "deltalake.toml"
    toml.write_text(
        f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        "[deltalake.table]\nretention_hours = 24\n[deltalake.storage]\nmin_file_size = 1024\n"
    )
    config = DeltaConfig.from_toml(toml)
    assert isinstance(config, DeltaConfig) and isinstance(config, Settings)
    assert config.deltalake.table.retention_hours == 24
    lake = DeltaLakeConnector(config)
    assert lake.root == str(tmp_path / "lake")
    assert DeltaLakeConnector(toml).config.deltalake.storage.min_file_size == 1024
    toml.write_text("[deltalake.table]\nretention_hours = -3\n")
    with pytest.raises(ConfigError) as err:
        DeltaConfig.from_toml(toml)
    assert "retention_hours" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        DeltaConfig.from_toml(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="engine"):
        DeltaLakeConnector(config, engine="duckdb")  # type: ignore[arg-type]


def test_tables_list_get_create_delete(tmp_path: Path) -> None:
    lake = DeltaLakeConnector(DeltaConfig.for_path(tmp_path / "lake"))
    assert lake.list_tables() == []
    with pytest.raises(TableNotFoundError) as err:
        lake.table("spans")
    assert err.value.name == "spans" and "spans" in str(err.value)
    with pytest.raises(TableNotFoundError):
        lake.table("not_a_table")
    with pytest.raises(TableNotFoundError):
        lake.get_or_create_table("not_a_table")

    logs = lake.get_or_create_table("logs")
    assert lake.list_tables() == ["logs"]
    assert logs.query().count() == 0 and logs.version() == 0
    assert lake.get_or_create_table("logs").version() == 0  # opened, not re-created
    lake.get_or_create_table("spans")
    assert lake.list_tables() == ["spans", "logs"]  # schema order

    lake.delete_table("logs")
    assert lake.list_tables() == ["spans"]
    with pytest.raises(TableNotFoundError):
        lake.delete_table("logs")
    assert not (tmp_path / "lake" / "logs").exists()


def test_created_tables_match_what_the_bridge_creates(tmp_path: Path) -> None:
    lake = DeltaLakeConnector(DeltaConfig.for_path(tmp_path / "by_connector"))
    for name in TABLES:
        lake.get_or_create_table(name)
    bridge_settings = make_settings(tmp_path / "by_bridge")
    DeltaRsEngine(Lakehouse.from_settings(bridge_settings)).open("spans")
    ours = DeltaTable(str(tmp_path / "by_connector" / "spans"))
    theirs = DeltaTable(str(tmp_path / "by_bridge" / "spans"))
    assert ours.schema() == theirs.schema()
    assert ours.metadata().partition_columns == theirs.metadata().partition_columns
    assert ours.metadata().configuration == theirs.metadata().configuration
    assert ours.metadata().description == theirs.metadata().description
    assert ours.protocol() == theirs.protocol()


def test_typed_errors_share_the_base_class() -> None:
    for error in (
        TableNotFoundError("x"),
        ConcurrentModificationError("spans", 3, 2, "conflict"),
    ):
        assert isinstance(error, OtelDeltaError)


def test_conflicting_writers_end_in_concurrent_modification_error(lake_path: Path) -> None:
    """Deletes racing over the same files conflict for real; with no retry budget the loser
    gets ConcurrentModificationError, and the table stays consistent."""
    config = DeltaConfig.for_path(lake_path, operations={"max_commit_retries": 0})
    errors: list[BaseException] = []
    done: list[int] = []
    tenants = [f"t{i}" for i in range(3)]

    def worker(tenant: str, barrier: threading.Barrier) -> None:
        table = DeltaLakeConnector(config).table("spans")
        barrier.wait()
        try:
            done.append(table.delete(f"attributes['tenant'] = '{tenant}'").deleted)
        except ConcurrentModificationError as exc:
            errors.append(exc)

    for _ in range(5):  # bounded: a real race, usually decided in the first round
        barrier = threading.Barrier(len(tenants))
        threads = [threading.Thread(target=worker, args=(t, barrier)) for t in tenants]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if errors:
            break
    assert errors, "no conflict observed in 5 rounds"
    error = errors[0]
    assert isinstance(error, ConcurrentModificationError)
    assert error.table == "spans" and error.attempts == 1 and error.version is not None
    # every committed delete is fully applied, none half-applied
    spans = DeltaLakeConnector(config).table("spans")
    remaining = {dict(r["attributes"]).get("tenant") for r in spans.query().to_pylist()}
    deleted_tenants = {t for t in tenants if t not in remaining}
    assert len(deleted_tenants) >= 1
