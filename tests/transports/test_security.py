"""TLS, mTLS and the bearer token on both OTLP transports, with a real CA made by openssl."""

from __future__ import annotations

import socket
import ssl

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_delta.errors import ConfigError
from tests import corpus
from tests.certs import Certs, make_certs
from tests.helpers import (
    RunningBridge,
    ServeProcess,
    bridge_config,
    free_port,
    make_settings,
    read_table,
    table_exists,
)

pytestmark = pytest.mark.e2e

PROTOBUF = {"Content-Type": "application/x-protobuf"}
TOKEN = "s3cr3t-t0ken"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def http_url(bridge: RunningBridge, scheme: str = "http") -> str:
    assert bridge.bridge.http is not None
    return f"{scheme}://127.0.0.1:{bridge.bridge.http.port}/v1/traces"


def test_bearer_token_on_both_transports(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_DELTA_TEST_TOKEN", TOKEN)
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(
        make_settings(lakehouse, receiver={"auth": {"token_env": "OTEL_DELTA_TEST_TOKEN"}})
    )
    body = corpus.trace_request().SerializeToString()
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            answer = requests.post(
                http_url(bridge), data=body, headers={**PROTOBUF, **headers}, timeout=30
            )
            assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
        channel = grpc.insecure_channel(bridge.endpoint)
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(corpus.trace_request(), metadata=metadata, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not table_exists(lakehouse, "spans")  # nothing of a refused request is stored

        # probes carry no token: the health service answers without one
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING

        ok = requests.post(
            http_url(bridge),
            data=body,
            headers={**PROTOBUF, "Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert ok.status_code == 200
        stub.Export(corpus.trace_request(), metadata=(("authorization", f"bearer {TOKEN}"),))
        assert read_table(lakehouse, "spans").num_rows == 8
    finally:
        bridge.stop()


def test_unset_token_variable_refuses_to_start(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("OTEL_DELTA_TEST_TOKEN", raising=False)
    settings = make_settings(
        tmp_path / "lake", receiver={"auth": {"token_env": "OTEL_DELTA_TEST_TOKEN"}}
    )
    with pytest.raises(ConfigError, match=r"receiver.auth.token_env: \$OTEL_DELTA_TEST_TOKEN"):
        RunningBridge(settings)


def tls_settings(certs: Certs, mtls: bool) -> dict:
    tls = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}
    if mtls:
        tls["client_ca_file"] = str(certs.ca)
    return {"tls": tls}


def grpc_channel(bridge: RunningBridge, certs: Certs, client: tuple | None = None):
    key, chain = (client[1].read_bytes(), client[0].read_bytes()) if client else (None, None)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(), private_key=key, certificate_chain=chain
    )
    return grpc.secure_channel(bridge.endpoint, credentials)


def test_tls_on_both_transports(tmp_path, certs, monkeypatch) -> None:
    # requests lets these variables override a session's own CA file (the SDK sets that)
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(variable, raising=False)
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse, receiver=tls_settings(certs, mtls=False)))
    try:
        body = corpus.trace_request().SerializeToString()
        answer = requests.post(
            http_url(bridge, "https"), data=body, headers=PROTOBUF, verify=certs.ca, timeout=30
        )
        assert answer.status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):  # plain HTTP on a TLS port
            requests.post(http_url(bridge), data=body, headers=PROTOBUF, timeout=30)
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc_channel(bridge, certs))
        stub.Export(corpus.trace_request(), timeout=30)
        with pytest.raises(grpc.RpcError) as plain:
            trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(bridge.endpoint)).Export(
                corpus.trace_request(), timeout=5
            )
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE

        # the SDK's HTTP exporter, trusting our CA
        provider = TracerProvider(resource=Resource.create({"service.name": "tls-svc"}))
        exporter = OTLPSpanExporter(
            endpoint=http_url(bridge, "https"), certificate_file=str(certs.ca)
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("tls").start_as_current_span("over-tls"):
            pass
        provider.shutdown()
        names = read_table(lakehouse, "spans").column("name").to_pylist()
        assert len(names) == 9 and "over-tls" in names
    finally:
        bridge.stop()


def post_https(
    bridge: RunningBridge, certs: Certs, body: bytes, cert: tuple | None
) -> requests.Response:
    """An OTLP/HTTP Export over TLS, trusting our CA, with `cert` as the client certificate."""
    return requests.post(
        http_url(bridge, "https"),
        data=body,
        headers=PROTOBUF,
        verify=certs.ca,
        cert=cert,
        timeout=30,
    )


def test_mtls_requires_a_client_certificate_from_the_ca(tmp_path, certs) -> None:
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse, receiver=tls_settings(certs, mtls=True)))
    try:
        body = corpus.trace_request().SerializeToString()
        for cert in (None, (certs.other_client_cert, certs.other_client_key)):
            # TLS 1.3: the client may finish its side first, then see the server hang up
            with pytest.raises(requests.exceptions.ConnectionError):
                post_https(bridge, certs, body, cert)
            with pytest.raises(grpc.RpcError) as refused:
                channel = grpc_channel(bridge, certs, cert)
                trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                    corpus.trace_request(), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not table_exists(lakehouse, "spans")

        good = (certs.client_cert, certs.client_key)
        answer = post_https(bridge, certs, body, good)
        assert answer.status_code == 200
        trace_service_pb2_grpc.TraceServiceStub(grpc_channel(bridge, certs, good)).Export(
            corpus.trace_request(), timeout=30
        )
        assert read_table(lakehouse, "spans").num_rows == 8
    finally:
        bridge.stop()


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"cert_file": "/nonexistent/tls.crt", "key_file": "/nonexistent/tls.key"}, "cert_file"),
        ("swapped", "cannot use cert_file"),
    ],
)
def test_bad_tls_files_refuse_to_start_with_one_line(tmp_path, certs, tls, message) -> None:
    if tls == "swapped":  # a key that does not belong to the certificate
        tls = {"cert_file": str(certs.server_cert), "key_file": str(certs.client_key)}
    settings = make_settings(tmp_path / "lake", receiver={"tls": tls})
    with pytest.raises(ConfigError, match=message) as error:
        RunningBridge(settings)
    assert "\n" not in str(error.value)


def test_a_token_not_in_utf8_is_refused_like_any_wrong_token(tmp_path) -> None:
    """HTTP header values are bytes: a client (any client, no token needed) may send a byte
    that is not UTF-8, e.g. a Latin-1 `ö`. It is a wrong token like any other: 401, one
    refusal counted, and no ERROR traceback in the log for each such request."""
    config = bridge_config(tmp_path, '[receiver.auth]\ntoken_env = "OTEL_DELTA_TEST_TOKEN"\n')
    serve = ServeProcess(config, env={"OTEL_DELTA_TEST_TOKEN": TOKEN})
    try:
        body = corpus.trace_request().SerializeToString()
        with socket.create_connection(("127.0.0.1", serve.http_port), timeout=30) as client:
            client.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Type: application/x-protobuf\r\nAuthorization: Bearer t\xf6ken\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            status_line = client.makefile("rb").readline()
        assert status_line.startswith(b"HTTP/1.1 401 "), status_line
        metrics = serve.metrics()
        assert 'reason="unauthenticated"' in metrics
    finally:
        serve.stop()
    assert not [line for line in serve.lines if "Traceback" in line or " ERROR " in line]
    assert not table_exists(tmp_path / "lake", "spans")


def tls12_handshake(port: int, certs: Certs, cipher: str) -> str:
    """The cipher a TLS 1.2 handshake offering only `cipher` agrees on (ssl.SSLError if none)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(cipher)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.cipher()[0]


def test_tls_12_takes_only_aead_ciphers_on_both_transports(tmp_path, certs) -> None:
    """TLS 1.2 with forward secrecy and an AEAD cipher only (as gRPC's own list): CBC suites
    (Lucky 13 and its kin) were accepted on OTLP/HTTP though not on OTLP/gRPC."""
    tls = tls_settings(certs, mtls=False)["tls"]
    config = bridge_config(
        tmp_path,
        f'[receiver.tls]\ncert_file = "{tls["cert_file"]}"\nkey_file = "{tls["key_file"]}"\n',
    )
    serve = ServeProcess(config)
    try:
        # the admin endpoint is plain HTTP: the line must not read as if it had TLS
        listening = next(line for line in serve.lines if "listening on" in line)
        assert (
            f"{serve.endpoint} (OTLP/gRPC), 127.0.0.1:{serve.http_port} (OTLP/HTTP) with TLS, "
            f"admin on 127.0.0.1:{serve.admin_port} (plain HTTP);"
        ) in listening
        for port in (serve.port, serve.http_port):
            assert tls12_handshake(port, certs, "ECDHE-RSA-AES128-GCM-SHA256")
            for cbc in ("ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES256-SHA384", "AES128-SHA"):
                with pytest.raises(ssl.SSLError):
                    tls12_handshake(port, certs, cbc)
    finally:
        serve.stop()


def test_a_short_token_is_said_to_be_weak_at_start_without_being_logged(tmp_path) -> None:
    """Nothing limits how many tokens a client may try: a short one gets a WARNING at start
    for each door it guards (naming the setting, never the token); a long one none."""
    port = free_port()
    config = bridge_config(
        tmp_path,
        '[receiver.auth]\ntoken_env = "OTEL_DELTA_TEST_TOKEN"\n'
        f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:{port}"\n'
        'token_env = "OTEL_DELTA_TEST_CS_TOKEN"\n',
    )
    short = {"OTEL_DELTA_TEST_TOKEN": "pw1234", "OTEL_DELTA_TEST_CS_TOKEN": "cs9876"}
    serve = ServeProcess(config, env=short)
    assert serve.stop() == 0
    warnings = [line for line in serve.lines if " WARNING " in line]
    assert len(warnings) == 2, serve.lines
    assert "receiver.auth.token_env ($OTEL_DELTA_TEST_TOKEN): the token has 6 characters" in (
        warnings[0] + warnings[1]
    )
    assert "connector_service.token_env ($OTEL_DELTA_TEST_CS_TOKEN)" in warnings[0] + warnings[1]
    assert not any("pw1234" in line or "cs9876" in line for line in serve.lines)

    strong = {"OTEL_DELTA_TEST_TOKEN": TOKEN * 2, "OTEL_DELTA_TEST_CS_TOKEN": TOKEN * 2}
    serve = ServeProcess(config, env=strong)
    assert serve.stop() == 0
    assert not [line for line in serve.lines if " WARNING " in line]
