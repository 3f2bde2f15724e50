"""The convert workers (`receiver.convert_workers`) of a real `serve`, under the signals an
operator's terminal or service manager sends."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import grpc
import psutil
import pytest
import requests
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.helpers import ServeProcess, bridge_config, read_table, wait_until
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e

WORKERS = {
    "OTEL_DELTA_RECEIVER__CONVERT_WORKERS": "2",
    "OTEL_DELTA_RECEIVER__NATIVE_CONVERT": "off",
}


def group_members(group: int) -> list[int]:
    """The processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[2]) == group:  # pgrp, after the state and the parent
            members.append(int(entry.name))
    return members


def test_ctrl_c_to_the_process_group_is_an_orderly_stop(tmp_path: Path) -> None:
    """A Ctrl-C in a terminal goes to every process of the foreground group, the workers
    too: they took it mid-conversion, and the stop then waited out
    buffer.stop_timeout_seconds, exiting 1 with 'is the object store answering?'."""
    server = ServeProcess(bridge_config(tmp_path), env=WORKERS, own_process_group=True)
    acked: list[int] = []
    stop = threading.Event()

    def send() -> None:
        stub = trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(server.endpoint))
        i = 0
        while not stop.is_set():
            i += 1
            try:
                stub.Export(one_span_request(i), timeout=30)
            except grpc.RpcError:
                return  # the server is stopping
            acked.append(i)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        wait_until(lambda: len(acked) >= 20, what="requests to be converted by the workers")
        os.killpg(server.proc.pid, signal.SIGINT)
        code = server.proc.wait(timeout=120)
        server._drainer.join(10)
    finally:
        stop.set()
        sender.join(60)
        if server.proc.poll() is None:
            server.kill9()
    assert code == 0, "".join(server.lines)
    assert not [line for line in server.lines if "stop did not finish" in line]
    assert read_table(tmp_path / "lake", "spans").num_rows >= len(acked)
    wait_until(lambda: not group_members(server.proc.pid), what="the workers to end")


def test_workers_end_with_a_server_killed_with_9(tmp_path: Path) -> None:
    """A server that ends without shutting its pool down (kill -9, or os._exit at the stop
    timeout) left its workers running for good, blocked on the pool's queue."""
    server = ServeProcess(bridge_config(tmp_path), env=WORKERS, own_process_group=True)
    assert len(group_members(server.proc.pid)) > 2  # the server, its workers, the tracker
    server.kill9()
    wait_until(lambda: not group_members(server.proc.pid), what="the workers to end")


def convert_workers(server: ServeProcess) -> list[psutil.Process]:
    """The server's convert workers: its children started by multiprocessing's spawn (not
    its resource tracker)."""
    children = psutil.Process(server.proc.pid).children()
    return [child for child in children if "spawn_main" in " ".join(child.cmdline())]


def test_a_killed_worker_gets_a_retryable_answer_and_a_new_pool(tmp_path: Path) -> None:
    """A convert worker that died (the OOM killer on a large request; kill -9 here) left its
    pool broken for good: every later Export got INTERNAL / 500 "failed to convert traces",
    which OTLP makes final, so every client dropped its data while /readyz said ready."""
    server = ServeProcess(
        bridge_config(tmp_path), env={"OTEL_DELTA_RECEIVER__CONVERT_WORKERS": "1"}
    )
    url = f"http://127.0.0.1:{server.http_port}/v1/traces"
    protobuf = {"Content-Type": "application/x-protobuf"}
    try:
        with grpc.insecure_channel(server.endpoint) as channel:
            traces = trace_service_pb2_grpc.TraceServiceStub(channel)
            [worker] = convert_workers(server)
            worker.kill()
            with pytest.raises(grpc.RpcError) as err:
                traces.Export(one_span_request(1), timeout=60)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
            assert "convert worker" in err.value.details()
            trailers = dict(err.value.trailing_metadata())
            assert RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds
            traces.Export(one_span_request(2), timeout=60)  # the new pool converts it

        [worker] = convert_workers(server)  # the new pool's, killed in turn
        worker.kill()
        answer = requests.post(
            url, data=one_span_request(3).SerializeToString(), headers=protobuf, timeout=60
        )
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        answer = requests.post(
            url, data=one_span_request(4).SerializeToString(), headers=protobuf, timeout=60
        )
        assert answer.status_code == 200, answer.text
        metrics = server.metrics()
        for transport in ("grpc", "http"):
            assert (
                'otel_delta_receiver_refused_requests_total{reason="convert_worker_lost",'
                f'signal="traces",transport="{transport}"}} 1.0'
            ) in metrics
    finally:
        code = server.stop()
    assert code == 0, "".join(server.lines)
    died = [line for line in server.lines if "convert worker process died" in line]
    assert len(died) == 2 and all("WARNING" in line for line in died), died
    assert not [line for line in server.lines if "Traceback" in line], "".join(server.lines)
    # acked once each, stored once each; the refused ones were neither logged nor stored
    assert sorted(read_table(tmp_path / "lake", "spans")["name"].to_pylist()) == ["s2", "s4"]


def test_requests_in_a_broken_pool_at_once_restart_it_once(tmp_path: Path) -> None:
    """Every request in the pool when its worker dies finds it broken at the same moment:
    the first starts a new pool, the others are answered without starting another."""
    server = ServeProcess(
        bridge_config(tmp_path), env={"OTEL_DELTA_RECEIVER__CONVERT_WORKERS": "1"}
    )
    received = (
        'otel_delta_receiver_export_stage_duration_seconds_count{signal="traces",stage="receive"}'
    )
    answers: dict[int, grpc.StatusCode] = {}

    def send(i: int) -> None:
        with grpc.insecure_channel(server.endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            try:
                stub.Export(one_span_request(i), timeout=60)
                answers[i] = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                answers[i] = exc.code()

    try:
        [worker] = convert_workers(server)
        worker.suspend()  # SIGSTOP: the requests queue up in its pool
        senders = [threading.Thread(target=send, args=(i,)) for i in range(1, 5)]
        for sender in senders:
            sender.start()
        wait_until(lambda: f"{received} 4.0" in server.metrics(), what="4 requests received")
        worker.kill()
        for sender in senders:
            sender.join(90)
        # received, a request is in the pool before the loop serves another: at most the
        # one received last may have reached the new pool instead
        assert set(answers.values()) <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK}
        assert list(answers.values()).count(grpc.StatusCode.UNAVAILABLE) >= 2, answers
        with grpc.insecure_channel(server.endpoint) as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(one_span_request(5), timeout=60)
        assert len(convert_workers(server)) == 1
    finally:
        code = server.stop()
    assert code == 0, "".join(server.lines)
    died = [line for line in server.lines if "convert worker process died" in line]
    assert len(died) == 1, died
    acked = sorted(f"s{i}" for i, answer in answers.items() if answer == grpc.StatusCode.OK)
    stored = read_table(tmp_path / "lake", "spans")["name"].to_pylist()
    assert sorted(stored) == [*acked, "s5"]
