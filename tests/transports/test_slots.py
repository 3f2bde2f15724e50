"""`receiver.max_concurrent_requests`: requests are received (HTTP) and converted with a slot,
across transports. A slow HTTP client that has sent its headers but not its body holds the only
slot; a gRPC Export then waits, and gets the retryable answer (with RetryInfo) if no slot frees
in time."""

from __future__ import annotations

import logging
import socket
import threading
import time

import grpc
import pytest
from prometheus_client import REGISTRY

from otel_delta.pipeline.export import SLOT_WAIT_SECONDS
from tests import corpus
from tests.helpers import RunningBridge, make_settings, read_table, wait_until

pytestmark = pytest.mark.e2e


def slow_http_request(port: int, body: bytes) -> socket.socket:
    """Headers and half the body; the rest is sent by the caller, later."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-protobuf\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock


def test_a_request_without_a_slot_waits_then_gets_retry(tmp_path) -> None:
    lake = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lake, receiver={"max_concurrent_requests": 1}))
    try:
        assert bridge.bridge.http is not None
        body = corpus.trace_request().SerializeToString()
        slow = slow_http_request(bridge.bridge.http.port, body)
        time.sleep(0.5)  # the slow request holds the slot, waiting for the rest of its body
        traces, _, _ = bridge.stubs(bridge.channel())
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as waited:
            traces.Export(corpus.trace_request(), timeout=30)
        assert waited.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "max_concurrent_requests" in waited.value.details()
        assert time.monotonic() - started >= SLOT_WAIT_SECONDS * 0.9
        trailers = dict(waited.value.trailing_metadata())
        assert "google.rpc.retryinfo-bin" in trailers

        # the slow client finishes: it is answered, and the slot serves the next Export at once
        slow.sendall(body[len(body) // 2 :])
        assert b"200 OK" in slow.recv(65536).split(b"\r\n")[0]
        slow.close()
        traces.Export(corpus.trace_request(), timeout=30)
    finally:
        bridge.stop()
    assert read_table(lake, "spans").num_rows == 8


def test_clients_that_hang_up_mid_body_give_their_slot_back(tmp_path) -> None:
    lake = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lake, receiver={"max_concurrent_requests": 1}))
    try:
        assert bridge.bridge.http is not None
        body = corpus.trace_request().SerializeToString()
        for _ in range(3):  # each takes the only slot, then goes away
            slow = slow_http_request(bridge.bridge.http.port, body)
            time.sleep(0.3)
            slow.close()
        time.sleep(0.5)
        traces, _, _ = bridge.stubs(bridge.channel())
        started = time.monotonic()
        traces.Export(corpus.trace_request(), timeout=30)
        assert time.monotonic() - started < SLOT_WAIT_SECONDS  # no wait for a lost slot
    finally:
        bridge.stop()
    assert read_table(lake, "spans").num_rows == 4


def answer_status(sock: socket.socket) -> int:
    """The HTTP status of the answer on `sock` (read until the status line is in)."""
    sock.settimeout(60)
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            break
        head += chunk
    return int(head.split(b" ", 2)[1])


def test_a_stalled_body_gets_504_and_its_slot_serves_the_next_request(tmp_path) -> None:
    """504, not 408: OTLP/HTTP clients retry 504 (DEADLINE_EXCEEDED's HTTP code), and the
    Collector's otlphttp exporter dropped a batch answered 408."""
    lake = tmp_path / "lake"
    bridge = RunningBridge(
        make_settings(lake, receiver={"max_concurrent_requests": 1, "http_body_timeout_seconds": 1})
    )
    try:
        assert bridge.bridge.http is not None
        body = corpus.trace_request().SerializeToString()
        stalled = slow_http_request(bridge.bridge.http.port, body)  # never sends the rest
        assert answer_status(stalled) == 504
        stalled.close()
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(corpus.trace_request(), timeout=SLOT_WAIT_SECONDS / 2)  # a free slot
    finally:
        bridge.stop()
    assert read_table(lake, "spans").num_rows == 4


def test_a_client_gone_before_its_body_is_counted_not_logged_as_an_error(tmp_path, caplog) -> None:
    lake = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lake, receiver={"max_concurrent_requests": 1}))
    labels = {"transport": "http", "signal": "traces", "reason": "client_disconnected"}
    before = REGISTRY.get_sample_value("otel_delta_receiver_refused_requests_total", labels) or 0
    try:
        assert bridge.bridge.http is not None
        body = corpus.trace_request().SerializeToString()
        slow_http_request(bridge.bridge.http.port, body).close()  # half a body, then gone
        wait_until(
            lambda: (
                REGISTRY.get_sample_value("otel_delta_receiver_refused_requests_total", labels)
                == before + 1
            ),
            timeout=30,
            what="the disconnect counted",
        )
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(corpus.trace_request(), timeout=SLOT_WAIT_SECONDS / 2)  # its slot is free
    finally:
        bridge.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert read_table(lake, "spans").num_rows == 4


def test_a_grpc_call_that_sends_no_message_gives_its_slot_back(tmp_path) -> None:
    """A client opens an Export without a deadline and never sends its message (a stuck
    exporter, or anyone holding streams open): the call held a slot for as long as its stream
    stayed open, so a few of them left every other Export UNAVAILABLE, on both transports. It
    gets DEADLINE_EXCEEDED after `receiver.grpc_message_timeout_seconds` instead."""
    lake = tmp_path / "lake"
    bridge = RunningBridge(
        make_settings(
            lake, receiver={"max_concurrent_requests": 1, "grpc_message_timeout_seconds": 1}
        )
    )
    release = threading.Event()

    def nothing_yet():
        release.wait()
        yield from ()

    try:
        export = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        stalled = bridge.channel().stream_unary(export).future(nothing_yet())
        with pytest.raises(grpc.RpcError) as timed_out:
            stalled.result(timeout=60)
        assert timed_out.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "grpc_message_timeout_seconds" in timed_out.value.details()
        traces, _, _ = bridge.stubs(bridge.channel())
        traces.Export(corpus.trace_request(), timeout=30)  # the slot serves the next Export
    finally:
        release.set()
        bridge.stop()
    assert read_table(lake, "spans").num_rows == 4
