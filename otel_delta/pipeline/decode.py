"""Decode + convert of raw Export bytes, in this process or in a pool of worker processes.

Conversion is pure-Python CPU work under the GIL, so one process tops out at one core. With
`receiver.convert_workers = N` the bytes go to N worker processes, which return Arrow IPC;
the server process keeps only gRPC, admission and the commits (delta-rs runs outside the GIL).
This balances load per request, so it helps even when one collector sends on one connection.
With `receiver.native_convert` the signals that have a native (Rust) converter skip the Python
conversion; Python stays the reference and converts whatever the native side declines.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from otel_delta.convert import Converted, Rejections, utf8
from otel_delta.convert import native as native_convert
from otel_delta.errors import (
    ConfigError,
    ConvertWorkerLostError,
    InvalidRequestError,
    OtelDeltaError,
    RequestTooLargeError,
)
from otel_delta.ipc import from_ipc, to_ipc
from otel_delta.pipeline.admission import admit
from otel_delta.pipeline.reservation import Reservation
from otel_delta.signals import SIGNALS_BY_NAME, Signal

T = TypeVar("T")

log = logging.getLogger(__name__)


def use_native(mode: str) -> bool:
    """`receiver.native_convert`: "auto" uses the native converter if built, "on" requires it."""
    if mode == "off":
        return False
    if mode == "on" and not native_convert.available():
        raise ConfigError(
            "receiver.native_convert = on, but the native converter is not installed "
            f"(run `make setup`): {native_convert.IMPORT_ERROR}"
        )
    return native_convert.available()


def _decode(signal: Signal, raw: bytes, native: bool) -> Converted:
    if native and (convert := native_convert.native_converter(signal.name)) is not None:
        converted = convert(raw)
        if converted is not None:  # None: declined, the Python converter answers
            return converted
    try:
        request = signal.request.FromString(raw)
    except (DecodeError, RecursionError) as exc:
        raise InvalidRequestError(f"cannot decode {signal.request.__name__}: {exc}") from None
    return signal.convert(request)


def decode_admitted(
    signal: Signal,
    raw: bytes,
    native: bool,
    partition_by: Sequence[str],
    repairs: utf8.StringRepairs | None = None,
) -> Converted:
    """The converter's rows (without the UTF-8 repair), then the admission rules
    (pipeline/admission.py), in one call: on a converter thread both run there, off the event
    loop (admission's pyarrow kernels were 3% of the bridge's busy samples under the
    Collector's metrics load, all on the loop). `Decoder.decode` repairs a request that
    fails, and calls this again with the repaired bytes and the `repairs` made, which the
    client is told of."""
    converted = _decode(signal, raw, native)
    if repairs is not None:
        converted.rejected.repaired(repairs)
    return admit(converted, partition_by)


def _repair(signal_name: str, raw: bytes, native: bool) -> utf8.Repaired | None:
    """`utf8.repair` of a request of this signal, by name: it runs in a worker process too."""
    return utf8.repair(SIGNALS_BY_NAME[signal_name].request.DESCRIPTOR, raw, native)


def _decode_in_worker(
    signal_name: str,
    raw: bytes,
    native: bool,
    partition_by: Sequence[str],
    repairs: utf8.StringRepairs | None = None,
) -> tuple[dict[str, bytes], Rejections] | OtelDeltaError:
    """Runs in a worker process; returns plain data (a refusal is returned, not raised)."""
    try:
        converted = decode_admitted(
            SIGNALS_BY_NAME[signal_name], raw, native, partition_by, repairs
        )
    except (InvalidRequestError, RequestTooLargeError) as exc:
        return exc
    return {name: to_ipc(t) for name, t in converted.tables.items()}, converted.rejected


def _warm_up() -> None:
    """Imports happen at pool start, not on the first request."""


def _leave_stop_signals_to_the_server(server_pid: int) -> None:
    """A worker's initializer: SIGINT and SIGTERM are the server's to act on (it shuts the
    pool down). A Ctrl-C reaches the whole foreground process group, systemd's
    KillMode=control-group every process of the unit: workers that took it (a
    KeyboardInterrupt in a conversion) left the pool's shutdown waiting, so the stop ran
    into buffer.stop_timeout_seconds and exited 1, blaming the object store."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_the_server(server_pid)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_the_server(server_pid: int) -> None:
    """Linux: the worker is killed when the server process ends. One that ends without
    shutting the pool down (os._exit at the stop timeout, kill -9) left its workers running,
    blocked on the pool's queue for good, and they take no SIGTERM (above)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server ended before this ran
        os._exit(0)


@contextlib.asynccontextmanager
async def _nothing_held(nbytes: int) -> AsyncIterator[None]:
    """`Reservation.beside` where no reservation counts the request (a WAL replay)."""
    yield


class Decoder:
    """Decodes in-process (`workers == 0`) or in a process pool."""

    def __init__(self, workers: int, native: bool = False) -> None:
        self.native = native
        self._pool: ProcessPoolExecutor | None = None
        # in-process native conversion runs outside the GIL: one thread per core is enough
        self._threads: ThreadPoolExecutor | None = None
        if native and workers == 0:
            self._threads = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="convert")
        self._workers = workers
        if workers > 0:
            self._pool = self._start_pool()
            for future in [self._pool.submit(_warm_up) for _ in range(workers)]:
                future.result()

    def _start_pool(self) -> ProcessPoolExecutor:
        # spawn, never fork: the server process runs gRPC threads
        return ProcessPoolExecutor(
            self._workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_leave_stop_signals_to_the_server,
            initargs=(os.getpid(),),
        )

    async def decode(
        self,
        signal: Signal,
        raw: bytes,
        partition_by: Sequence[str] = (),
        held: Reservation | None = None,
    ) -> Converted:
        """The request's rows, past the admission rules for tables partitioned by
        `partition_by`. A request whose only fault is strings that are not UTF-8 is converted
        from a repaired copy (`decode`): a second copy of about the request's size, which
        `held`, the request's reservation, counts for as long as it is kept (BufferFullError
        if it does not fit by the retry delay)."""
        try:
            return await self._converted(signal, raw, partition_by)
        except InvalidRequestError as refused:
            repaired = await self._off_loop(_repair, signal.name, raw, self.native)
            if repaired is None:
                raise
            repairs = utf8.StringRepairs(repaired.strings, repaired.first_field)
            beside = held.beside if held is not None else _nothing_held
            async with beside(len(repaired.data)):
                try:
                    return await self._converted(signal, repaired.data, partition_by, repairs)
                except InvalidRequestError:
                    raise refused from None  # not UTF-8 alone: the answer is the first refusal

    async def _converted(
        self,
        signal: Signal,
        raw: bytes,
        partition_by: Sequence[str],
        repairs: utf8.StringRepairs | None = None,
    ) -> Converted:
        if self._pool is None:
            return await self._off_loop(
                decode_admitted, signal, raw, self.native, partition_by, repairs
            )
        outcome = await self._off_loop(
            _decode_in_worker, signal.name, raw, self.native, tuple(partition_by), repairs
        )
        if isinstance(outcome, OtelDeltaError):
            raise outcome
        ipc, rejected = outcome
        tables = {name: from_ipc(data) for name, data in ipc.items()}
        return Converted(tables, rejected)

    async def _off_loop(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` where this decoder converts: in a worker process, on a converter
        thread (native conversion, outside the GIL: the event loop stays free), or here."""
        pool = self._pool
        executor = pool or self._threads
        if executor is None:
            return function(*args)
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, function, *args)
        except BrokenProcessPool:
            if pool is None:
                raise
            self._replace(pool)
            raise ConvertWorkerLostError(
                "a convert worker process died (out of memory?) while this request was in its "
                "pool, which was restarted; retry"
            ) from None

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """A pool one of whose workers died is broken for good (every submit fails at once):
        answering every later request INTERNAL, it made each client drop its data while
        /readyz said ready. The first request to find `broken` starts a new pool; those that
        find it at the same moment see it replaced already (all run on the event loop). The
        new workers start on their own, not awaited: the loop keeps serving meanwhile."""
        if self._pool is not broken:
            return
        self._pool = self._start_pool()
        broken.shutdown(wait=False, cancel_futures=True)
        for _ in range(self._workers):
            self._pool.submit(_warm_up)
        log.warning(
            "a convert worker process died (killed, e.g. out of memory on a large request); "
            "the requests in its pool got the retryable answer, the pool was restarted with "
            "%d worker(s)",
            self._workers,
        )

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
