"""The native (Rust, `native/`) converter: same tables, rejections and messages, faster.

Python stays the reference implementation. The native side decides per request, before
producing anything, whether it converts the request; when it does not (bytes that do not decode,
attribute values nested deeper than its limit), `convert` returns None and the caller runs the
Python converter on the same bytes, so the answer is always the reference one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pyarrow as pa

from otel_delta.convert.result import MAX_REPORTED_ERRORS, Converted, Rejections
from otel_delta.errors import RequestTooLargeError
from otel_delta.tables import TABLES_OF_SIGNAL
from otel_delta.tables.packed import packed_schema

# The native converter allocates with mimalloc (native/src/lib.rs). Without an arena reserved
# up front, mimalloc maps fresh memory for the rows of each request and gives it back once a
# commit has freed them, so the kernel zeroes pages for every request anew: measured under
# 8,192-span requests, that was 27% of the bridge's CPU (perf: clear_page), and reserving
# 1 GiB of address space (committed only when touched) cut the converter threads' system time
# from 1.9 s to 0.35 s and lowered peak RSS. mimalloc reads the variable when the module
# loads; a value set by the user is kept.
os.environ.setdefault("MIMALLOC_RESERVE_OS_MEMORY", "1GiB")
# And freed memory stays committed for 100 ms (mimalloc's default: 10 ms) before it is given
# back: with requests every 100 ms or so, each request's rows otherwise faulted in fresh pages
# again (py-spy: mi_page_free_list_extend). Collector load, traces, two alternating runs, a
# second against 10 ms: 101.0k / 116.4k -> 123.2k / 127.4k spans/s stored, 13.0 / 11.1 -> 9.9 /
# 9.5 us per span. But a second kept what a faster load freed: with requests every 35 ms
# (bench/collector_load.py's Go client, 180 traces requests, the buffer full), peak RSS was
# 915-997 MiB against `buffer.max_bytes` 512 MiB, 837 MiB at 100 ms and 800 MiB at 0 (which
# cost 11% of the spans/s). 100 against 1000 ms, two alternating pairs of the 60-request load:
# 209.5k / 232.3k against 203.3k / 212.8k spans/s, peak RSS 795 / 716 against 809 / 793 MiB;
# bench/memory.py at 64 clients 357 / 312 / 320 against 312 / 317 / 312 MiB (goal: 364).
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "100")

try:
    import otel_delta_native
except ImportError as exc:  # not built: `make setup` builds it
    otel_delta_native = None
    IMPORT_ERROR: str | None = str(exc)
else:
    IMPORT_ERROR = None

NativeConvert = Callable[[bytes], Converted | None]


def available() -> bool:
    return otel_delta_native is not None


# what the native converter's error for a request it will not build starts with
TOO_LARGE = "too large to convert"


def _converter(signal: str, tables: tuple[str, ...]) -> NativeConvert:
    # the rows come packed (tables/packed.py): repeated columns as dictionaries
    schemas = {name: packed_schema(name) for name in tables}
    converter = otel_delta_native.Converter(signal, list(schemas.items()), MAX_REPORTED_ERRORS)

    def convert(raw: bytes) -> Converted | None:
        try:
            outcome = converter.convert(raw)
        except RuntimeError as exc:
            if not str(exc).startswith(TOO_LARGE):  # native/src/context.rs
                raise
            raise RequestTooLargeError(f"{signal} request {exc}; send smaller requests") from None
        except Exception:
            raise
        except BaseException as exc:  # a Rust panic (pyo3 raises it as a BaseException)
            if type(exc).__name__ != "PanicException":
                raise
            # seen: one column of the request's rows past 2 GiB (resource attributes repeat
            # in every row); the Python converter would need even more memory for it
            raise RequestTooLargeError(
                f"{signal} request too large to convert ({exc}); send smaller requests"
            ) from None
        if outcome is None:
            return None
        batches, count, messages = outcome
        # schema= makes pyarrow check each batch has exactly its table's schema
        converted = {
            name: pa.Table.from_batches([pa.record_batch(batch)], schema=schemas[name])
            for name, batch, _ in batches
        }
        held = {name: allocated for name, _, allocated in batches}
        return Converted(converted, Rejections(count, messages), held)

    return convert


_converters: dict[str, NativeConvert] = {}


def native_converter(signal: str) -> NativeConvert | None:
    """The native converter of a signal ("traces", …), or None if it has none or is not built."""
    if otel_delta_native is None or signal not in TABLES_OF_SIGNAL:
        return None
    if signal not in _converters:
        _converters[signal] = _converter(signal, TABLES_OF_SIGNAL[signal])
    return _converters[signal]


_utf8_repairs: dict[int, Callable[[bytes], tuple[bytes, int, list[str]] | None]] = {}


def utf8_repair(
    table: list[dict[int, tuple[str, int | None]]],
) -> Callable[[bytes], tuple[bytes, int, list[str]] | None] | None:
    """The native walk of convert/utf8.py led by `table` (its `message_table`), or None if the
    extension is not built: (repaired bytes, strings repaired, the first one's field names)."""
    if otel_delta_native is None:
        return None
    if id(table) not in _utf8_repairs:  # the tables are built once per request type and kept
        _utf8_repairs[id(table)] = otel_delta_native.Utf8Repair(table).repair
    return _utf8_repairs[id(table)]
