"""Certificates rotated under a running bridge, as cert-manager rotates a mounted Kubernetes
Secret: new files in a new directory, then an atomic swap of the `..data` symlink. Both OTLP
transports serve the new certificate from the next handshake on; a rotation that does not
load keeps the old one serving, with one WARNING."""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
import requests
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_delta.remote.client import ConnectorClient
from tests import corpus
from tests.certs import Certs
from tests.helpers import (
    ServeProcess,
    bridge_config,
    free_port,
    read_table,
    table_exists,
    wait_until,
)

pytestmark = pytest.mark.e2e

PROTOBUF = {"Content-Type": "application/x-protobuf"}
INTERVAL = 0.5  # reload_interval_seconds of these bridges


@pytest.fixture(autouse=True)
def _no_ca_bundle(monkeypatch) -> None:
    # requests lets these variables override a session's own CA file (the SDK sets that)
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(variable, raising=False)


def write_secret(mount: Path, cert: Path, key: Path, ca: Path) -> None:
    """Mount (or update) a Secret the way the kubelet does: the files in a new directory,
    `..data` swapped to it by one rename of a symlink, the names users see linking through
    `..data`."""
    mount.mkdir(exist_ok=True)
    version = mount / f"..{time.time_ns()}"
    version.mkdir()
    for name, source in (("tls.crt", cert), ("tls.key", key), ("ca.crt", ca)):
        (version / name).write_bytes(source.read_bytes())
    (mount / "..data_tmp").symlink_to(version.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if not (mount / name).is_symlink():
            (mount / name).symlink_to(f"..data/{name}")


def serve(tmp_path: Path, mount: Path, interval: float = INTERVAL, mtls: bool = False):
    """`otel-delta serve` with `[receiver.tls]` on the mounted Secret."""
    ca = f'client_ca_file = "{mount / "ca.crt"}"\n' if mtls else ""
    config = bridge_config(
        tmp_path,
        '[buffer]\nack = "commit"\nflush_interval_seconds = 0.1\n'
        f'[receiver.tls]\ncert_file = "{mount / "tls.crt"}"\nkey_file = "{mount / "tls.key"}"\n'
        f"{ca}reload_interval_seconds = {interval}\n",
    )
    return ServeProcess(config)


def fingerprint(pem: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read_text())).hexdigest()


def served(port: int) -> str:
    """The fingerprint of the certificate a new TLS connection to `port` is given (not
    verified: which one it is, is the question)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def both_serve(server: ServeProcess, cert: Path) -> bool:
    return served(server.port) == fingerprint(cert) and served(server.http_port) == fingerprint(
        cert
    )


def export_with_sdk(server: ServeProcess, ca: Path, name: str) -> None:
    """One span over OTLP/gRPC and one over OTLP/HTTP with the SDK's exporters, trusting only
    `ca`; both must be accepted."""
    grpc_exporter = GrpcSpans(
        endpoint=server.endpoint,
        insecure=False,
        credentials=grpc.ssl_channel_credentials(root_certificates=ca.read_bytes()),
        timeout=30,
    )
    http_exporter = HttpSpans(
        endpoint=f"https://127.0.0.1:{server.http_port}/v1/traces",
        certificate_file=str(ca),
        timeout=30,
    )
    for transport, exporter in (("grpc", grpc_exporter), ("http", http_exporter)):
        finished = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "tls-reload"}))
        provider.add_span_processor(SimpleSpanProcessor(finished))
        with provider.get_tracer("tls").start_as_current_span(f"{name}-{transport}"):
            pass
        assert exporter.export(finished.get_finished_spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()


def span_names(tmp_path: Path) -> list[str]:
    lake = tmp_path / "lake"
    return (
        read_table(lake, "spans").column("name").to_pylist() if table_exists(lake, "spans") else []
    )


def levelled(server: ServeProcess, level: str) -> list[str]:
    return [line for line in server.lines if f" {level} " in line and "receiver.tls" in line]


def test_a_rotated_certificate_from_a_new_ca_is_served_without_a_restart(
    tmp_path, old, new
) -> None:
    mount = tmp_path / "secret"
    write_secret(mount, old.server_cert, old.server_key, old.ca)
    server = serve(tmp_path, mount)
    try:
        assert both_serve(server, old.server_cert)
        export_with_sdk(server, old.ca, "before")

        write_secret(mount, new.server_cert, new.server_key, new.ca)
        wait_until(lambda: both_serve(server, new.server_cert), what="the new certificate")
        export_with_sdk(server, new.ca, "after")
        assert sorted(span_names(tmp_path)) == [
            "after-grpc", "after-http", "before-grpc", "before-http"
        ]  # fmt: skip
    finally:
        assert server.stop() == 0
    infos = levelled(server, "INFO")
    assert len([line for line in infos if "the files changed" in line]) == 1, server.lines
    assert not levelled(server, "WARNING"), server.lines
    assert not [line for line in server.lines if "Traceback" in line]


def test_a_rotation_that_does_not_load_keeps_the_old_certificate_with_one_warning(
    tmp_path, old, new
) -> None:
    """A key that does not match its certificate (a rotation half done): the old pair keeps
    serving, one WARNING says so (however many handshakes look again), and once the files are
    right the new pair is served."""
    mount = tmp_path / "secret"
    write_secret(mount, old.server_cert, old.server_key, old.ca)
    server = serve(tmp_path, mount)
    try:
        write_secret(mount, new.server_cert, old.server_key, new.ca)

        def warned() -> bool:
            served(server.port)  # handshakes are what look at the files
            return bool(levelled(server, "WARNING"))

        wait_until(warned, what="the WARNING")
        # several more intervals of handshakes on both transports: each looks again
        for _ in range(4):
            time.sleep(INTERVAL)
            assert both_serve(server, old.server_cert)
        export_with_sdk(server, old.ca, "kept")
        assert span_names(tmp_path) and set(span_names(tmp_path)) == {"kept-grpc", "kept-http"}
        warnings = levelled(server, "WARNING")
        assert len(warnings) == 1, server.lines
        assert "receiver.tls: cannot use cert_file" in warnings[0]
        assert "KEY_VALUES_MISMATCH" in warnings[0]

        write_secret(mount, new.server_cert, new.server_key, new.ca)
        wait_until(lambda: both_serve(server, new.server_cert), what="the new certificate")
        export_with_sdk(server, new.ca, "fixed")
    finally:
        assert server.stop() == 0
    assert len(levelled(server, "WARNING")) == 1, server.lines
    assert not [line for line in server.lines if "Traceback" in line or "PRIVATE KEY" in line]


def test_a_rotated_client_ca_replaces_the_old_one(tmp_path, old, new) -> None:
    """mTLS: after the rotation a client certificate of the old CA is refused on both
    transports, one of the new CA accepted (the new CA replaces the old one, not added)."""
    mount = tmp_path / "secret"
    write_secret(mount, old.server_cert, old.server_key, old.ca)
    server = serve(tmp_path, mount, mtls=True)
    body = corpus.trace_request().SerializeToString()

    def post(certs: Certs) -> requests.Response:
        return requests.post(
            f"https://127.0.0.1:{server.http_port}/v1/traces",
            data=body,
            headers=PROTOBUF,
            verify=certs.ca,
            cert=(certs.client_cert, certs.client_key),
            timeout=30,
        )

    def export(certs: Certs) -> None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=certs.ca.read_bytes(),
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        with grpc.secure_channel(server.endpoint, credentials) as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                corpus.trace_request(), timeout=10
            )

    try:
        assert post(old).status_code == 200
        export(old)
        write_secret(mount, new.server_cert, new.server_key, new.ca)
        wait_until(lambda: both_serve(server, new.server_cert), what="the new certificate")
        stale = replace(old, ca=new.ca)  # trusts the new server, presents the old client cert
        # TLS 1.3: the client may finish its side first, then see the server hang up
        with pytest.raises(requests.exceptions.ConnectionError):
            post(stale)
        with pytest.raises(grpc.RpcError) as refused:
            export(stale)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert post(new).status_code == 200
        export(new)
    finally:
        assert server.stop() == 0
    spans = sum(
        len(scope.spans) for r in corpus.trace_request().resource_spans for scope in r.scope_spans
    )
    assert read_table(tmp_path / "lake", "spans").num_rows == 4 * spans  # nothing refused stored


def test_reload_interval_zero_keeps_the_certificate_of_start(tmp_path, old, new) -> None:
    mount = tmp_path / "secret"
    write_secret(mount, old.server_cert, old.server_key, old.ca)
    server = serve(tmp_path, mount, interval=0)
    try:
        write_secret(mount, new.server_cert, new.server_key, new.ca)
        for _ in range(3):  # handshakes over more than a reloading bridge's interval
            time.sleep(INTERVAL)
            assert both_serve(server, old.server_cert)
        export_with_sdk(server, old.ca, "kept")
    finally:
        assert server.stop() == 0
    assert not levelled(server, "INFO") and not levelled(server, "WARNING")


def test_the_connector_service_serves_a_rotated_certificate(tmp_path, old, new) -> None:
    """`[connector_service.tls]` reloads as `[receiver.tls]` does (its own section, its own
    files): a client trusting only the new CA calls it once the files are rotated."""
    mount = tmp_path / "secret"
    write_secret(mount, old.server_cert, old.server_key, old.ca)
    port = free_port()
    token = "connector-token-of-32-characters"
    config = bridge_config(
        tmp_path,
        f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:{port}"\n'
        'token_env = "TEST_CONNECTOR_TOKEN"\n[connector_service.tls]\n'
        f'cert_file = "{mount / "tls.crt"}"\nkey_file = "{mount / "tls.key"}"\n'
        f"reload_interval_seconds = {INTERVAL}\n",
    )
    server = ServeProcess(config, env={"TEST_CONNECTOR_TOKEN": token})
    try:
        assert served(port) == fingerprint(old.server_cert)
        write_secret(mount, new.server_cert, new.server_key, new.ca)
        wait_until(lambda: served(port) == fingerprint(new.server_cert), what="the new cert")
        client = ConnectorClient(f"127.0.0.1:{port}", token, ca_file=new.ca)
        try:
            assert list(client.call("Tables", client.pb.TablesRequest(), timeout=30).tables) == []
        finally:
            client.close()
    finally:
        assert server.stop() == 0
    changed = [line for line in server.lines if "connector_service.tls: the files changed" in line]
    assert len(changed) == 1, server.lines
