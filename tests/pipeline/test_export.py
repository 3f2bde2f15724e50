"""The transport-neutral pipeline: each kind of request gets its outcome, nothing else."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_delta.buffer import GroupCommitBuffer
from otel_delta.convert import Converted
from otel_delta.convert.native import native_converter
from otel_delta.engines import DeltaRsEngine
from otel_delta.errors import (
    BufferFullError,
    InvalidRequestError,
    RequestTooLargeError,
    ShuttingDownError,
)
from otel_delta.lakehouse import Lakehouse
from otel_delta.pipeline import Accepted, Decoder, ExportPipeline, Rejected, Retryable
from otel_delta.pipeline.body import Body
from otel_delta.pipeline.reservation import (
    FIRST_EXPECTED_BYTES,
    RECENT_REQUESTS,
    RequestSizes,
    Reservation,
)
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.status import status_for
from tests.helpers import (
    PLACEHOLDER,
    RunningBridge,
    make_settings,
    read_table,
    table_exists,
    wait_until,
)
from tests.test_cli import one_span_request

TRACES = SIGNALS_BY_NAME["traces"]


def run(
    tmp_path: Path,
    scenario,
    *,
    max_bytes: int = 1 << 30,
    max_request_bytes: int = 1 << 20,
    flush_interval: float = 0.05,
    retry_after: float = 0.5,
):
    async def main():
        buffer = GroupCommitBuffer(
            DeltaRsEngine(Lakehouse(str(tmp_path))),
            flush_interval_seconds=flush_interval,
            max_rows=10_000,
            max_bytes=max_bytes,
            retry_after_seconds=retry_after,
        )
        buffer.start()
        pipeline = ExportPipeline(buffer, Decoder(0), max_request_bytes)
        try:
            return await scenario(pipeline, buffer)
        finally:
            await buffer.close()
            pipeline.close()

    return asyncio.run(main())


def test_valid_request_is_accepted_and_committed(tmp_path: Path) -> None:
    async def scenario(pipeline, buffer):
        return await pipeline.export(TRACES, Body(one_span_request(1).SerializeToString()))

    outcome = run(tmp_path, scenario)
    assert outcome == Accepted(0, "", rows=1)
    assert not outcome.partial
    assert read_table(tmp_path, "spans").num_rows == 1


def test_invalid_items_are_a_partial_success(tmp_path: Path) -> None:
    request = one_span_request(1)
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.CopyFrom(request.resource_spans[0].scope_spans[0].spans[0])
    bad.trace_id = b"short"

    async def scenario(pipeline, buffer):
        return await pipeline.export(TRACES, Body(request.SerializeToString()))

    outcome = run(tmp_path, scenario)
    assert isinstance(outcome, Accepted) and outcome.partial and outcome.rejected == 1
    assert "trace" in outcome.error_message
    assert read_table(tmp_path, "spans").num_rows == 1


def test_undecodable_and_oversized_requests_are_rejected(tmp_path: Path) -> None:
    async def scenario(pipeline, buffer):
        garbage = await pipeline.export(TRACES, Body(b"\xff\xff\xff not protobuf"))
        big = await pipeline.export(
            TRACES, Body(ExportTraceServiceRequest().SerializeToString() + b"\0" * 300)
        )
        return garbage, big

    garbage, big = run(tmp_path, scenario, max_request_bytes=200)
    assert isinstance(garbage, Rejected) and isinstance(garbage.error, InvalidRequestError)
    assert status_for(garbage.error).http == 400
    assert isinstance(big, Rejected) and isinstance(big.error, RequestTooLargeError)
    assert "max_receive_message_bytes" in big.message
    assert status_for(big.error).http == 413


def test_full_buffer_and_shutdown_are_retryable_with_the_delay(tmp_path: Path) -> None:
    """A request that still does not fit once it has waited the retry delay gets it."""

    async def scenario(pipeline, buffer):
        buffer.reserve(1)  # another request, still being converted, fills the buffer
        loop = asyncio.get_running_loop()
        started = loop.time()
        full = await pipeline.export(TRACES, Body(one_span_request(2).SerializeToString()))
        waited = loop.time() - started
        buffer.release(1)
        closing = asyncio.create_task(buffer.close())
        await asyncio.sleep(0)
        stopping = await pipeline.export(TRACES, Body(one_span_request(3).SerializeToString()))
        await closing
        return full, waited, stopping

    full, waited, stopping = run(
        tmp_path, scenario, max_bytes=1, flush_interval=60, retry_after=0.3
    )
    assert isinstance(full, Retryable) and isinstance(full.error, BufferFullError)
    assert full.retry_after == 0.3 and status_for(full.error).retryable
    assert waited >= 0.3
    assert isinstance(stopping, Retryable) and isinstance(stopping.error, ShuttingDownError)
    assert not table_exists(tmp_path, "spans")  # neither request was stored


async def _second_behind_a_buffered_first(pipeline, buffer):
    """Export one span, and once its rows are buffered (the buffer is then full), another."""
    first = asyncio.create_task(
        pipeline.export(TRACES, Body(one_span_request(1).SerializeToString()))
    )
    while buffer.buffered_bytes == 0:
        await asyncio.sleep(0.001)
    second = await pipeline.export(TRACES, Body(one_span_request(2).SerializeToString()))
    return await first, second


def test_a_request_waits_for_a_commit_to_free_space(tmp_path: Path) -> None:
    """A full buffer holds a request back until a commit frees space, up to the retry delay,
    rather than answering at once: the client would wait that long anyway."""
    first, second = run(
        tmp_path, _second_behind_a_buffered_first, max_bytes=1, flush_interval=0.2, retry_after=30
    )
    assert isinstance(first, Accepted) and isinstance(second, Accepted)
    assert sorted(read_table(tmp_path, "spans")["name"].to_pylist()) == ["s1", "s2"]


def test_a_full_buffer_commits_its_open_groups_at_once(tmp_path: Path) -> None:
    """A request that finds the buffer full has the open groups committed now, not at the
    next flush interval: rows can fill the memory bound long before a group fills its rows
    (large spans), and nothing else would free the space until the interval."""
    # waiting for the interval (1 s), the second request would be refused (after 0.5 s)
    first, second = run(
        tmp_path, _second_behind_a_buffered_first, max_bytes=1, flush_interval=1.0, retry_after=0.5
    )
    assert isinstance(first, Accepted) and isinstance(second, Accepted)
    assert sorted(read_table(tmp_path, "spans")["name"].to_pylist()) == ["s1", "s2"]


def test_requests_being_converted_count_against_the_memory_bound(tmp_path: Path) -> None:
    """Admission reserves memory for the conversion before it starts (4 bytes per request
    byte) and releases it once the rows are buffered: concurrent large requests cannot take
    memory the buffer's bound does not see."""
    raw = one_span_request(1).SerializeToString()

    async def scenario(pipeline, buffer):
        buffer.reserve(900)  # another request, still converting
        refused = await pipeline.export(TRACES, Body(raw))
        buffer.release(900)
        accepted = await pipeline.export(TRACES, Body(raw))
        return refused, accepted, buffer.reserved_bytes

    refused, accepted, reserved = run(tmp_path, scenario, max_bytes=900 + 2 * len(raw))
    assert isinstance(refused, Retryable) and isinstance(refused.error, BufferFullError)
    assert "being converted" in refused.message
    assert isinstance(accepted, Accepted)
    assert reserved == 0  # released again, refused or not


def test_a_body_is_read_only_once_its_expected_size_fits(tmp_path: Path) -> None:
    """The memory a request will need is held before its body is read (its expected size:
    the largest of the signal's recent requests), so requests that cannot fit are refused
    without being received, and one being received is counted while it is."""
    raw = one_span_request(1).SerializeToString()
    held_while_reading: list[int] = []

    async def scenario(pipeline, buffer):
        async def receive(_: Reservation) -> Body:
            held_while_reading.append(buffer.reserved_bytes)
            return Body(raw)

        first = await pipeline.export(TRACES, receive)  # alone: always let in
        buffer.reserve(100)  # another request, being converted
        second = await pipeline.export(TRACES, receive)  # expects about len(raw): fits
        pipeline.sizes.observe(TRACES.code, 10 * len(raw))  # a large one was seen lately
        third = await pipeline.export(TRACES, receive)  # expects 10 x: refused unread
        buffer.release(100)
        return first, second, third, buffer.reserved_bytes

    first, second, third, reserved = run(tmp_path, scenario, max_bytes=100 + 5 * len(raw))
    assert isinstance(first, Accepted) and isinstance(second, Accepted)
    assert isinstance(third, Retryable) and isinstance(third.error, BufferFullError)
    assert held_while_reading == [5 * FIRST_EXPECTED_BYTES, 100 + 5 * len(raw)]
    assert reserved == 0


def test_a_body_that_fails_unexpectedly_is_an_internal_error_of_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An error no one expected while a body is received (a library's bug: zlib-ng raised
    SystemError for a deflate stream asking for a preset dictionary) answers that request
    INTERNAL, with its traceback in the log, and the next request is served."""

    async def scenario(pipeline, buffer):
        async def broken(_: Reservation) -> Body:
            raise SystemError("returned NULL without setting an exception")

        failed = await pipeline.export(TRACES, broken)
        served = await pipeline.export(TRACES, Body(one_span_request(1).SerializeToString()))
        return failed, served, buffer.reserved_bytes

    failed, served, reserved = run(tmp_path, scenario)
    assert isinstance(failed, Rejected) and isinstance(failed.error, SystemError)
    assert failed.message == "failed to receive traces"
    assert status_for(failed.error).http == 500
    assert "failed to receive a traces request" in caplog.text
    assert isinstance(served, Accepted) and reserved == 0


def not_utf8_request() -> bytes:
    """One span whose name is Latin-1 ("café" as b"caf\\xe9"): converted from a copy with the
    string repaired (convert/utf8.py), 2 bytes longer (U+FFFD for the invalid byte)."""
    request = one_span_request(1)
    request.resource_spans[0].scope_spans[0].spans[0].name = PLACEHOLDER
    return request.SerializeToString().replace(PLACEHOLDER.encode(), b"caf\xe9")


def test_a_repaired_request_counts_its_repaired_copy_while_it_converts(tmp_path: Path) -> None:
    """A request repaired for strings that are not UTF-8 is converted from a second copy of
    its bytes: that copy is held in the request's reservation, beside what the request
    counts, while it converts, and given back after. It was not counted at all."""
    raw = not_utf8_request()
    held_while_converting: list[int] = []

    async def scenario(pipeline, buffer):
        def convert(request):
            held_while_converting.append(buffer.reserved_bytes)
            return TRACES.convert(request)

        signal = dataclasses.replace(TRACES, convert=convert)
        outcome = await pipeline.export(signal, Body(raw))
        return outcome, buffer.reserved_bytes

    outcome, reserved = run(tmp_path, scenario)
    assert isinstance(outcome, Accepted) and "not valid UTF-8" in outcome.error_message
    assert held_while_converting == [5 * len(raw) + len(raw) + 2]
    assert reserved == 0
    assert read_table(tmp_path, "spans")["name"].to_pylist() == ["caf\ufffd"]


def test_a_repaired_copy_that_does_not_fit_is_retryable(tmp_path: Path) -> None:
    """The repaired copy waits for room as the request did, then gets the retryable answer,
    and the request gives back what it held."""
    raw = not_utf8_request()

    async def scenario(pipeline, buffer):
        pipeline.sizes.observe(TRACES.code, len(raw))  # the request is expected: it fits
        buffer.reserve(100)  # another request, being converted
        outcome = await pipeline.export(TRACES, Body(raw))
        return outcome, buffer.reserved_bytes

    outcome, reserved = run(tmp_path, scenario, max_bytes=100 + 5 * len(raw) + len(raw))
    assert isinstance(outcome, Retryable) and isinstance(outcome.error, BufferFullError)
    assert reserved == 100
    assert not table_exists(tmp_path, "spans")


def test_expected_request_size_is_the_largest_of_the_recent_ones() -> None:
    sizes = RequestSizes()
    assert sizes.expected(TRACES.code) == FIRST_EXPECTED_BYTES
    sizes.observe(TRACES.code, 5_000)
    sizes.observe(TRACES.code, 300)
    assert sizes.expected(TRACES.code) == 5_000
    assert sizes.expected(SIGNALS_BY_NAME["logs"].code) == FIRST_EXPECTED_BYTES
    for _ in range(RECENT_REQUESTS):
        sizes.observe(TRACES.code, 300)
    assert sizes.expected(TRACES.code) == 300  # the large one is forgotten


def many_spans(count: int) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for i in range(1, count + 1):
        span = spans.add(
            trace_id=i.to_bytes(16, "big"),
            span_id=i.to_bytes(8, "big"),
            name=f"GET /items/{i}",
            start_time_unix_nano=1_700_000_000_000_000_000 + i,
            end_time_unix_nano=1_700_000_000_000_001_000 + i,
        )
        span.attributes.add(key="http.route").value.string_value = "/items/{id}"
        span.attributes.add(key="http.response.status_code").value.int_value = 200
    return request


@pytest.mark.e2e
@pytest.mark.parametrize("ack", ["commit", "wal"])
def test_the_buffer_counts_what_native_rows_hold(tmp_path: Path, ack: str) -> None:
    """In both ack modes the native converter's figure for a table's memory (its buffers'
    capacities, `Converted.held`) reaches the buffer's bound, not pyarrow's shorter lengths."""
    request = many_spans(2_000)
    convert = native_converter("traces")
    assert convert is not None, "the native converter is not built"
    converted: list[Converted] = []
    # on a thread of its own, as the new bridge's converter threads: a thread sizes its
    # builders from its last request (native/src/columns.rs), a fresh one from nothing
    thread = threading.Thread(target=lambda: converted.append(convert(request.SerializeToString())))
    thread.start()
    thread.join()
    expected = converted[0]
    held = expected.held["spans"]
    assert held > expected.tables["spans"].get_total_buffer_size()
    bridge = RunningBridge(make_settings(tmp_path / "lake", ack=ack, flush_interval_seconds=30))
    try:
        traces, _, _ = bridge.stubs(bridge.channel())
        future = traces.Export.future(request)
        wait_until(lambda: bridge.bridge.buffer.buffered_bytes > 0, what="rows buffered")
        assert bridge.bridge.buffer.buffered_bytes == held
    finally:
        bridge.stop()
    future.result(timeout=30)
    assert read_table(tmp_path / "lake", "spans").num_rows == 2_000


def test_a_reservation_keeps_what_it_holds_while_it_waits_for_more(tmp_path: Path) -> None:
    """A request whose body turns out larger than expected asks for the difference; what it
    held stays counted while it waits (its body is in memory), and alone it is let in."""

    async def scenario(pipeline, buffer):
        with Reservation(buffer) as held:
            await held.request(100)  # 500 bytes
            buffer.reserve(400)  # another request, being converted: 900 of 1,000
            growing = asyncio.create_task(held.request(150))  # 750: 250 more
            await asyncio.sleep(0.05)
            waiting = (growing.done(), buffer.reserved_bytes)
            buffer.release(400)
            await growing
            grown = buffer.reserved_bytes
            await held.request(1_000)  # 5,000: over the bound, but alone
            alone = buffer.reserved_bytes
            await held.request(10)  # less: no waiting, the rest given back
            return waiting, grown, alone, buffer.reserved_bytes

    waiting, grown, alone, shrunk = run(tmp_path, scenario, max_bytes=1_000, retry_after=30)
    assert waiting == (False, 900)
    assert (grown, alone, shrunk) == (750, 5_000, 50)
