"""receiver.native_convert: the bridge stores the same rows and answers the same with it on/off."""

from __future__ import annotations

import random

import grpc
import pytest

from otel_delta.config import Settings
from otel_delta.convert import native
from otel_delta.errors import ConfigError
from otel_delta.receiver.decode import use_native
from tests import corpus
from tests.convert.test_native_parity import deep, one_span_with, random_request
from tests.helpers import RunningBridge, read_table
from tests.receiver.test_bad_input import TRACE_EXPORT, span, trace_request


def test_modes() -> None:
    assert native.available(), native.IMPORT_ERROR  # make setup builds it
    assert use_native("off") is False
    assert use_native("auto") is True
    assert use_native("on") is True


def test_on_without_the_native_module_fails_at_start_with_one_line(monkeypatch) -> None:
    monkeypatch.setattr(native, "otel_delta_native", None)  # as if it were not built
    assert use_native("auto") is False
    with pytest.raises(ConfigError) as err:
        use_native("on")
    assert "receiver.native_convert" in str(err.value)
    assert "\n" not in str(err.value)


def run(lakehouse, mode: str, workers: int):
    settings = Settings(
        receiver={
            "grpc_endpoint": "127.0.0.1:0",
            "native_convert": mode,
            "convert_workers": workers,
        },
        buffer={"flush_interval_seconds": 0.1},
        deltalake={"table_path": str(lakehouse)},
    )
    bridge = RunningBridge(settings)
    answers = []
    try:
        channel = bridge.channel()
        traces, _, _ = bridge.stubs(channel)
        rng = random.Random(7)
        requests = [
            corpus.trace_request(),
            trace_request(span("ok"), span("bad", trace_id=b"\x01")),
            one_span_with(deep(20)),  # declined by the native side: Python converts it
            *(random_request(rng) for _ in range(6)),
        ]
        for request in requests:
            answers.append(traces.Export(request))
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(TRACE_EXPORT)(b"\x0a\xff garbage")
        answers.append((err.value.code(), err.value.details()))
    finally:
        bridge.stop()
    return answers, read_table(lakehouse, "spans")


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [0, 2])
def test_native_on_and_off_store_the_same_rows_and_answers(tmp_path, workers) -> None:
    on_answers, on_table = run(tmp_path / "on", "on", workers)
    off_answers, off_table = run(tmp_path / "off", "off", workers)
    assert on_answers == off_answers
    assert any(a.partial_success.rejected_spans for a in on_answers[:-1])
    assert on_table.num_rows > 0
    assert on_table.sort_by("span_id").equals(off_table.sort_by("span_id"))
