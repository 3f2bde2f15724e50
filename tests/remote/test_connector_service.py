"""ConnectorService served by a real bridge on its own port, called by a real gRPC client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from deltalake import DeltaTable

from otel_delta.config import Settings
from otel_delta.errors import ConfigError
from otel_delta.remote.client import ConnectorClient
from otel_delta.remote.protocol import CHUNK_BYTES
from tests.certs import Certs, make_certs
from tests.commands.trace_data import known_trace, other_spans
from tests.helpers import RunningBridge, ServeProcess, bridge_config, free_port, wait_until

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-token"


@pytest.fixture
def served(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TEST_CONNECTOR_TOKEN", TOKEN)
    lake = tmp_path / "lake"
    settings = Settings(
        receiver={"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"},
        admin={"endpoint": "127.0.0.1:0"},
        buffer={"flush_interval_seconds": 0.05, "ack": "commit"},  # queried right after
        deltalake={"table_path": str(lake)},
        connector_service={
            "enabled": True,
            "endpoint": "127.0.0.1:0",
            "token_env": "TEST_CONNECTOR_TOKEN",
        },
    )
    bridge = RunningBridge(settings)
    traces = bridge.stubs(bridge.channel())[0]
    traces.Export(known_trace(), timeout=30)
    # enough rows that the Arrow stream spans several gRPC messages
    for _ in range(3):
        traces.Export(other_spans(4000), timeout=60)
    endpoint = f"127.0.0.1:{bridge.bridge.connector_port}"
    assert bridge.bridge.connector_port not in (0, bridge.port)
    yield lake, endpoint
    bridge.stop()


def test_refuses_calls_without_the_token(served) -> None:
    _, endpoint = served
    pb = ConnectorClient(endpoint, None).pb
    for token in (None, "wrong", TOKEN + "x"):
        client = ConnectorClient(endpoint, token)
        for rpc, request in [
            ("Tables", pb.TablesRequest()),
            ("Delete", pb.DeleteRequest(table="spans", where="1 = 1")),
        ]:
            with pytest.raises(grpc.RpcError) as refused:
                client.call(rpc, request)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as refused:
            client.query("spans")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    bad_scheme = grpc.insecure_channel(endpoint)
    from otel_delta.remote.protocol import generated

    stub = generated()[1].ConnectorServiceStub(bad_scheme)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Tables(pb.TablesRequest(), metadata=[("authorization", TOKEN)])  # no "Bearer"
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_query_stream_equals_the_table_read(served) -> None:
    lake, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    assert list(client.call("Tables", client.pb.TablesRequest()).tables) == ["spans"]
    expected = DeltaTable(str(lake / "spans")).to_pyarrow_table()
    assert expected.nbytes > 2 * CHUNK_BYTES  # the stream really is several messages
    got = client.query("spans")
    key = [("span_id", "ascending"), ("service_name", "ascending")]
    assert got.schema.equals(expected.schema)
    assert got.sort_by(key).equals(expected.sort_by(key))
    filtered = client.query("spans", where="service_name = 'db'", columns=["name", "status_code"])
    assert filtered.to_pylist() == [{"name": "SELECT orders", "status_code": "STATUS_CODE_ERROR"}]
    old = client.query("spans", version=1)
    assert old.num_rows == 3


def test_operations_and_error_mapping(served) -> None:
    lake, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    pb = client.pb
    stats = client.call("Statistics", pb.TableRequest(table="spans"))
    assert stats.rows == 3 + 12_000 and stats.version == 4
    history = client.call("History", pb.HistoryRequest(table="spans", limit=2))
    assert [e.version for e in history.entries] == [4, 3]
    deleted = client.call("Delete", pb.DeleteRequest(table="spans", where="service_name = 'db'"))
    assert deleted.deleted == 1
    restored = client.call("Restore", pb.RestoreRequest(table="spans", version=4))
    assert restored.restored_to == 4
    assert DeltaTable(str(lake / "spans")).to_pyarrow_table().num_rows == 12_003
    optimized = client.call("Optimize", pb.OptimizeRequest(table="spans", z_order=["trace_id"]))
    assert optimized.files_removed > 0
    vacuum = client.call("Vacuum", pb.VacuumRequest(table="spans", retention_hours=0, dry_run=True))
    assert vacuum.dry_run and len(vacuum.files) > 0

    for rpc, request, code in [
        ("Statistics", pb.TableRequest(table="nope"), grpc.StatusCode.NOT_FOUND),
        ("Statistics", pb.TableRequest(table="logs"), grpc.StatusCode.NOT_FOUND),
        (
            "Delete",
            pb.DeleteRequest(table="spans", where="no_such = 1"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ("Delete", pb.DeleteRequest(table="spans", where=""), grpc.StatusCode.INVALID_ARGUMENT),
        ("Restore", pb.RestoreRequest(table="spans", version=999), grpc.StatusCode.NOT_FOUND),
        # no version: not version 0, which restored the empty table
        ("Restore", pb.RestoreRequest(table="spans"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            "Restore",
            pb.RestoreRequest(table="spans", version=4, timestamp="2026-01-01T00:00:00Z"),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ]:
        with pytest.raises(grpc.RpcError) as failed:
            client.call(rpc, request)
        assert failed.value.code() == code, (rpc, failed.value.details())
    assert DeltaTable(str(lake / "spans")).to_pyarrow_table().num_rows == 12_003
    with pytest.raises(grpc.RpcError) as failed:
        client.query("spans", where="DROP TABLE spans")
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_history_carries_the_normalized_metrics(served) -> None:
    """A remote `history()` gives each commit's figures under the same snake_case names, as
    ints, as the local connector's on the same table: `History` sent `metrics_json` only, so a
    remote client had no `normalized_metrics`."""
    from otel_delta.connector import DeltaConfig, DeltaLakeConnector

    lake, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    pb = client.pb
    client.call("Delete", pb.DeleteRequest(table="spans", where="service_name = 'db'"))
    client.call("Optimize", pb.OptimizeRequest(table="spans"))
    local = DeltaLakeConnector(DeltaConfig.for_path(lake)).table("spans").history()
    remote = client.history("spans")

    def figures(entries) -> list[tuple]:
        return [(e.version, e.operation, e.normalized_metrics, e.num_records) for e in entries]

    assert figures(remote) == figures(local)
    # as sent, not computed by the client from metrics_json
    sent = client.call("History", pb.HistoryRequest(table="spans")).entries
    assert [dict(e.normalized_metrics) for e in sent] == [e.normalized_metrics for e in local]
    by_operation = {e.operation: e.normalized_metrics for e in remote}
    assert by_operation["DELETE"]["rows_deleted"] == 1
    assert by_operation["OPTIMIZE"]["files_removed"] > 0 < by_operation["OPTIMIZE"]["bytes_added"]
    assert {e.version: e for e in remote}[1].num_records == 3  # the first append: known_trace
    assert [e.version for e in client.history("spans", limit=2)] == [e.version for e in local[:2]]
    client.close()


def test_enabled_without_token_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings(
        receiver={"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0"},
        admin={"endpoint": "127.0.0.1:0"},
        deltalake={"table_path": str(tmp_path)},
        wal={"dir": str(tmp_path / "wal")},
        connector_service={"enabled": True, "endpoint": "127.0.0.1:0"},
    )
    with pytest.raises(ConfigError, match="token"):
        RunningBridge(settings)


def test_hard_and_partition_scoped_delete(served, monkeypatch) -> None:
    lake, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    pb = client.pb
    monkeypatch.delenv("OTEL_DELTA_HASH_KEY", raising=False)
    hard = pb.DeleteRequest(table="spans", partition_path="service_name=db", hard=True)
    with pytest.raises(grpc.RpcError) as failed:
        client.call("Delete", hard)
    assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION, failed.value.details()
    assert "OTEL_DELTA_HASH_KEY" in failed.value.details()

    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "service-key")
    hard.actor = "remote-dpo"
    deleted = client.call("Delete", hard)
    assert deleted.deleted == 1 and deleted.files_purged >= 1 and deleted.log_entries_removed > 0
    audit = DeltaTable(str(lake / "_audit")).to_pyarrow_table().to_pylist()
    assert [(r["actor"], r["operation"]) for r in audit] == [("remote-dpo", "hard_delete")]
    with pytest.raises(grpc.RpcError) as failed:
        client.call("Delete", pb.DeleteRequest(table="spans", partition_path="service_name=nope"))
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND


def test_redact(served, monkeypatch) -> None:
    lake, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    pb = client.pb
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "service-key")
    answer = client.call(
        "Redact",
        pb.RedactRequest(
            table="spans", attribute="service.name", mode="mask", where="service_name = 'db'"
        ),
    )
    assert answer.rows_affected == 1 and answer.files_purged >= 1
    rows = DeltaTable(str(lake / "spans")).to_pyarrow_table().to_pylist()
    assert [
        dict(r["resource_attributes"])["service.name"] for r in rows if r["service_name"] == "db"
    ] == ["***"]
    with pytest.raises(grpc.RpcError) as failed:
        client.call("Redact", pb.RedactRequest(table="spans", mode="hash"))  # no target
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_stalled_query_streams_leave_a_thread_for_other_calls(served) -> None:
    """A Query holds a server thread while its client reads. Clients that stop reading took
    all four threads, and every other call (Tables, a Restore, …) waited for them: now at most
    three stream at once, a fourth is RESOURCE_EXHAUSTED at once (retry later), the other
    calls still run, and a cancelled stream frees its place and is counted as CANCELLED."""
    from otel_delta.metrics import CONNECTOR_CALLS

    _, endpoint = served
    client = ConnectorClient(endpoint, TOKEN)
    request = client.pb.QueryRequest(table="spans")
    metadata = [("authorization", f"Bearer {TOKEN}")]
    cancelled = CONNECTOR_CALLS.labels("Query", "CANCELLED")
    before = cancelled._value.get()
    # readers that do not read: HTTP/2's window stays at 64 KiB (no BDP probe to grow it), so
    # the server's thread waits to send the next 1 MiB chunk
    from otel_delta.remote.protocol import generated

    slow = grpc.insecure_channel(endpoint, options=[("grpc.http2.bdp_probe", 0)])
    slow_stub = generated()[1].ConnectorServiceStub(slow)
    stalled = []
    for _ in range(3):
        stream = slow_stub.Query(request, metadata=metadata, timeout=120)
        next(stream)  # the first chunk; the rest waits for a reader that never comes
        stalled.append(stream)
    with pytest.raises(grpc.RpcError) as busy:
        next(client.stub.Query(request, metadata=metadata, timeout=30))
    assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert list(client.call("Tables", client.pb.TablesRequest(), timeout=30).tables) == ["spans"]

    stalled.pop().cancel()
    wait_until(lambda: cancelled._value.get() == before + 1, timeout=30, what="the cancel")
    assert client.query("spans", limit=5).num_rows == 5  # its place is free again
    for stream in stalled:
        stream.cancel()
    slow.close()


def test_tls_and_mtls_from_its_own_section(tmp_path: Path) -> None:
    """`[connector_service.tls]`: `otel-delta serve` serves the ConnectorService over TLS only,
    so the token and the results do not cross the network in clear; with a client CA, a
    caller also needs a certificate that CA signed."""
    certs = make_certs(tmp_path / "certs")
    port = free_port()
    config = bridge_config(
        tmp_path,
        f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:{port}"\n'
        'token_env = "TEST_CONNECTOR_TOKEN"\n[connector_service.tls]\n'
        f'cert_file = "{certs.server_cert}"\nkey_file = "{certs.server_key}"\n'
        f'client_ca_file = "{certs.ca}"\n',
    )
    serve = ServeProcess(config, env={"TEST_CONNECTOR_TOKEN": TOKEN})
    try:
        assert any(
            f"ConnectorService listening on 127.0.0.1:{port} with TLS" in line
            for line in serve.lines
        )
        endpoint = f"127.0.0.1:{port}"
        refused = [
            ConnectorClient(endpoint, TOKEN),  # plain text
            ConnectorClient(endpoint, TOKEN, ca_file=certs.ca),  # no client certificate
            ConnectorClient(
                endpoint,
                TOKEN,
                ca_file=certs.ca,
                cert_file=certs.other_client_cert,
                key_file=certs.other_client_key,
            ),
        ]
        for client in refused:
            with pytest.raises(grpc.RpcError) as failed:
                client.call("Tables", client.pb.TablesRequest(), timeout=10)
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
            client.close()
        client = ConnectorClient(
            endpoint,
            TOKEN,
            ca_file=certs.ca,
            cert_file=certs.client_cert,
            key_file=certs.client_key,
        )
        assert list(client.call("Tables", client.pb.TablesRequest()).tables) == []
        client.close()
    finally:
        assert serve.stop() == 0


def test_tls_files_that_do_not_load_stop_serve_with_one_line(tmp_path: Path) -> None:
    config = bridge_config(
        tmp_path,
        f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:0"\ntoken = "{TOKEN * 2}"\n'
        '[connector_service.tls]\ncert_file = "/nonexistent/tls.crt"\n'
        'key_file = "/nonexistent/tls.key"\n',
    )
    argv = [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "otel-delta: config error: connector_service.tls.cert_file: No such file or directory: "
        "/nonexistent/tls.crt"
    )


def test_a_client_certificate_without_a_ca_is_tls_with_the_system_roots(tmp_path: Path) -> None:
    """A client given its certificate and key but no `ca_file` called in plain text: it never
    read the files, its token crossed the network in clear to a plain-text listener, and
    against the TLS server it failed without saying why. Any TLS file now means TLS, trusting
    the system's roots (here GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, in a process of its own: gRPC
    reads them once per process); no file at all is still plain text."""
    certs = make_certs(tmp_path / "certs")
    plain_port, tls_port = free_port(), free_port()
    for name in ("plain", "tls"):
        (tmp_path / name).mkdir()
    plain = ServeProcess(
        bridge_config(
            tmp_path / "plain",
            f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:{plain_port}"\n'
            'token_env = "TEST_CONNECTOR_TOKEN"\n',
        ),
        env={"TEST_CONNECTOR_TOKEN": TOKEN},
    )
    try:
        endpoint = f"127.0.0.1:{plain_port}"
        client = ConnectorClient(endpoint, TOKEN)  # no TLS file: plain text, as chosen
        assert list(client.call("Tables", client.pb.TablesRequest()).tables) == []
        client.close()
        client = ConnectorClient(
            endpoint, TOKEN, cert_file=certs.client_cert, key_file=certs.client_key
        )
        with pytest.raises(grpc.RpcError) as failed:  # a TLS handshake a plain server refuses
            client.call("Tables", client.pb.TablesRequest(), timeout=10)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        client.close()
    finally:
        assert plain.stop() == 0

    secure = ServeProcess(
        bridge_config(
            tmp_path / "tls",
            f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:{tls_port}"\n'
            'token_env = "TEST_CONNECTOR_TOKEN"\n[connector_service.tls]\n'
            f'cert_file = "{certs.server_cert}"\nkey_file = "{certs.server_key}"\n'
            f'client_ca_file = "{certs.ca}"\n',
        ),
        env={"TEST_CONNECTOR_TOKEN": TOKEN},
    )
    try:
        call = (
            "import sys\nfrom otel_delta.remote.client import ConnectorClient\n"
            "client = ConnectorClient(sys.argv[1], sys.argv[2], cert_file=sys.argv[3],"
            " key_file=sys.argv[4])\n"
            "print(list(client.call('Tables', client.pb.TablesRequest(), timeout=10).tables))\n"
        )
        argv = [
            sys.executable,
            "-c",
            call,
            f"127.0.0.1:{tls_port}",
            TOKEN,
            str(certs.client_cert),
            str(certs.client_key),
        ]
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)},
        )
        assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr[-2000:]
    finally:
        assert secure.stop() == 0


@pytest.fixture(scope="module")
def client_certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"cert_file": "client", "key_file": ""},
            "ConnectorClient: cert_file needs key_file: set both, or neither",
        ),
        ({"key_file": "client"}, "ConnectorClient: key_file needs cert_file: set both, or neither"),
        (
            {"cert_file": "/nonexistent/client.crt", "key_file": "client"},
            "ConnectorClient.cert_file: No such file or directory: /nonexistent/client.crt",
        ),
        (
            {"cert_file": "client", "key_file": "/nonexistent/client.key"},
            "ConnectorClient.key_file: No such file or directory: /nonexistent/client.key",
        ),
        (
            {"ca_file": "/nonexistent/ca.crt"},
            "ConnectorClient.ca_file: No such file or directory: /nonexistent/ca.crt",
        ),
    ],
)
def test_client_tls_files_that_cannot_be_used_are_one_config_error(
    client_certs: Certs, files: dict[str, str], message: str
) -> None:
    """A certificate without its key (or a key without its certificate) called in plain text,
    and a path that does not exist was never opened: now each is a ConfigError naming it, at
    construction, before any call."""
    real = {"client": {"cert_file": client_certs.client_cert, "key_file": client_certs.client_key}}
    given = {key: real[path][key] if path in real else path for key, path in files.items()}
    with pytest.raises(ConfigError) as refused:
        ConnectorClient("127.0.0.1:1", TOKEN, **given)
    assert str(refused.value) == "config error: " + message
