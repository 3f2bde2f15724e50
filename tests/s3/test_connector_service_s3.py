"""The ConnectorService of a bridge whose lake is on S3 (versitygw): a real gRPC client lists,
queries (the Arrow stream equals delta-rs' read of the S3 table), time-travels, deletes,
restores, optimizes and vacuums, and the results are read back from S3."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from deltalake import DeltaTable

from otel_delta.config import Settings
from otel_delta.remote.client import ConnectorClient
from tests.commands.trace_data import known_trace, other_spans
from tests.helpers import RunningBridge
from tests.s3 import S3Server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOKEN = "s3-connector-token"


def test_every_connector_call_on_an_s3_lake(
    tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_CONNECTOR_TOKEN", TOKEN)
    settings = Settings(
        receiver={"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"},
        admin={"endpoint": "127.0.0.1:0"},
        buffer={"flush_interval_seconds": 0.05, "ack": "commit"},  # queried right after
        wal={"dir": str(tmp_path / "wal")},
        deltalake={
            "table_path": s3.url("lake"),
            "storage": {"options": s3.storage_options()},
        },
        connector_service={
            "enabled": True,
            "endpoint": "127.0.0.1:0",
            "token_env": "TEST_CONNECTOR_TOKEN",
        },
    )
    bridge = RunningBridge(settings)
    try:
        traces = bridge.stubs(bridge.channel())[0]
        traces.Export(known_trace(), timeout=30)
        for _ in range(2):
            traces.Export(other_spans(2000), timeout=60)
        client = ConnectorClient(f"127.0.0.1:{bridge.bridge.connector_port}", TOKEN)
        pb = client.pb

        def on_s3(version: int | None = None) -> DeltaTable:
            uri = s3.url("lake", "spans")
            return DeltaTable(uri, storage_options=s3.storage_options(), version=version)

        assert list(client.call("Tables", pb.TablesRequest()).tables) == ["spans"]
        key = [("span_id", "ascending"), ("service_name", "ascending")]
        expected = on_s3().to_pyarrow_table()
        assert client.query("spans").sort_by(key).equals(expected.sort_by(key))
        assert client.query("spans", version=1).num_rows == 3  # time travel on S3
        stats = client.call("Statistics", pb.TableRequest(table="spans"))
        assert (stats.rows, stats.version) == (4003, 3)

        deleted = client.call(
            "Delete", pb.DeleteRequest(table="spans", where="service_name = 'db'")
        )
        assert deleted.deleted == 1 and on_s3().to_pyarrow_table().num_rows == 4002
        restored = client.call("Restore", pb.RestoreRequest(table="spans", version=3))
        assert restored.restored_to == 3 and on_s3().to_pyarrow_table().num_rows == 4003
        history = client.call("History", pb.HistoryRequest(table="spans", limit=2))
        assert [e.version for e in history.entries] == [5, 4]

        optimized = client.call("Optimize", pb.OptimizeRequest(table="spans", z_order=["trace_id"]))
        assert optimized.files_removed > 0
        vacuum = client.call("Vacuum", pb.VacuumRequest(table="spans", retention_hours=0))
        assert not vacuum.dry_run and len(vacuum.files) >= optimized.files_removed
        after = on_s3()
        assert after.to_pyarrow_table().sort_by(key).equals(expected.sort_by(key))
        parquet = [k for k in s3.objects("lake", "spans") if k.endswith(".parquet")]
        live = {uri.rsplit("/", 1)[-1] for uri in after.file_uris()}
        assert {k.rsplit("/", 1)[-1] for k in parquet if "_delta_log" not in k} == live

        with pytest.raises(grpc.RpcError) as failed:
            client.call("Statistics", pb.TableRequest(table="logs"))
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        bridge.stop()
