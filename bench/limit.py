"""In-process limit: how many spans/s one thread can parse and encode to Parquet, with no gRPC
and no Delta, and what our conversion costs on top.

On pre-built, pre-serialized OTLP trace requests (`bench.common.build_payloads`), each stage is
timed on its own: protobuf parse, `spans_to_arrow`, Parquet zstd encode into memory (per
request, and of all tables concatenated), and the native converter (request bytes → table) when
it is built. The *limit* is parse + Parquet encode of each request's table: roughly the least
work any OTLP → Parquet bridge must do; conversion is excluded (it is our cost, not the floor).
`bench.ingest` measures the bridge against this limit in the same run; `run_signal_limit` is the
same limit for any signal on gzip-compressed requests (gunzip counted), for
`bench.collector_load`. Run from the repository root:

    .venv/bin/python -m bench.limit --spans 100000
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.common import MIB, Payload, Rate, build_payloads, rate_table
from otel_delta.convert import spans_to_arrow
from otel_delta.convert.native import native_converter
from otel_delta.signals import SIGNALS_BY_NAME


@dataclass
class Baseline:
    """Seconds spent on each stage for all payloads, in one process, one thread."""

    spans: int
    request_bytes: int
    parse_seconds: float
    convert_seconds: float
    encode_seconds: float
    concat_seconds: float
    parquet_bytes: int
    native_convert_seconds: float | None = None  # bytes → table, parse included; None: not built

    def rate(self, seconds: float) -> float:
        return self.spans / seconds if seconds > 0 else 0.0

    @property
    def limit_seconds(self) -> float:
        """Parse + Parquet encode: conversion excluded, it is our cost, not the floor."""
        return self.parse_seconds + self.encode_seconds

    @property
    def pipeline_seconds(self) -> float:
        return self.parse_seconds + self.convert_seconds + self.encode_seconds

    @property
    def parse_rate(self) -> float:
        return self.rate(self.parse_seconds)

    @property
    def encode_rate(self) -> float:
        return self.rate(self.encode_seconds)

    @property
    def concat_rate(self) -> float:
        return self.rate(self.concat_seconds)

    @property
    def limit_rate(self) -> float:
        return self.rate(self.limit_seconds)

    @property
    def pipeline_rate(self) -> float:
        return self.rate(self.pipeline_seconds)


def _encode(table: pa.Table) -> int:
    """Parquet zstd into memory (no disk: the limit should not depend on the file system)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.tell()


def run_baseline(payloads: Sequence[Payload]) -> Baseline:
    """The limit encodes each request's table on its own, as the brief defines it; the
    concatenated encode is shown too, because the bridge commits many requests per file."""
    started = time.perf_counter()
    requests = [ExportTraceServiceRequest.FromString(p.data) for p in payloads]
    parsed = time.perf_counter()
    tables = [spans_to_arrow(r).tables["spans"] for r in requests]
    converted = time.perf_counter()
    parquet_bytes = sum(_encode(table) for table in tables)
    encoded = time.perf_counter()
    _encode(pa.concat_tables(tables))
    concatenated = time.perf_counter()
    native_seconds = None
    if (native := native_converter("traces")) is not None:
        for p in payloads:
            native(p.data)
        native_seconds = time.perf_counter() - concatenated
    return Baseline(
        spans=sum(t.num_rows for t in tables),
        request_bytes=sum(len(p.data) for p in payloads),
        parse_seconds=parsed - started,
        convert_seconds=converted - parsed,
        encode_seconds=encoded - converted,
        concat_seconds=concatenated - encoded,
        parquet_bytes=parquet_bytes,
        native_convert_seconds=native_seconds,
    )


def rate_rows(base: Baseline) -> list[Rate]:
    """The baseline's rows of the printed table (the ingest benchmark prints them first)."""
    return [
        ("in-process, 1 thread, no gRPC/Delta:", None, None),
        ("  parse only", base.parse_rate, base.parse_seconds),
        ("  limit: parse + Parquet zstd", base.limit_rate, base.limit_seconds),
        ("  parse + convert + Parquet zstd", base.pipeline_rate, base.pipeline_seconds),
        ("  (convert alone)", base.rate(base.convert_seconds), base.convert_seconds),
        *(
            [("  (native convert alone, parse incl.)", base.rate(nat), nat)]
            if (nat := base.native_convert_seconds)
            else []
        ),
        ("  (Parquet zstd alone, per request)", base.encode_rate, base.encode_seconds),
        ("  (Parquet zstd alone, concatenated)", base.concat_rate, base.concat_seconds),
    ]


def payloads_line(base: Baseline, build_seconds: float) -> str:
    return f"(payloads built in {build_seconds:.1f} s, {base.request_bytes / MIB:,.1f} MiB of OTLP)"


def baseline_json(base: Baseline) -> dict[str, Any]:
    return {
        **asdict(base),
        "parse_spans_per_s": base.parse_rate,
        "parquet_per_request_spans_per_s": base.encode_rate,
        "parquet_concatenated_spans_per_s": base.concat_rate,
        "limit_spans_per_s": base.limit_rate,
        "pipeline_spans_per_s": base.pipeline_rate,
    }


@dataclass
class SignalLimit:
    """The limit of one signal on gzip-compressed requests, one thread: seconds per stage."""

    signal: str
    items: int
    gzip_bytes: int
    request_bytes: int
    gunzip_seconds: float
    parse_seconds: float
    convert_seconds: float  # the Python converter: shown, not part of the limit
    encode_seconds: float
    parquet_bytes: int

    def rate(self, seconds: float) -> float:
        return self.items / seconds if seconds > 0 else 0.0

    @property
    def limit_seconds(self) -> float:
        """gunzip + parse + Parquet zstd encode; conversion excluded, as in `Baseline`."""
        return self.gunzip_seconds + self.parse_seconds + self.encode_seconds

    @property
    def limit_rate(self) -> float:
        return self.rate(self.limit_seconds)

    @property
    def cpu_us_per_item(self) -> float:
        return self.limit_seconds / self.items * 1e6 if self.items else 0.0


def run_signal_limit(signal: str, compressed: Sequence[bytes]) -> SignalLimit:
    """`run_baseline`'s limit for any signal ("traces", "logs", "metrics") on gzip-compressed
    requests: gunzip, protobuf parse, then Parquet zstd of each table the request converts to
    (metrics: one per point type), each stage timed on its own, one request at a time (so that
    large runs need not hold every parsed request at once)."""
    kind = SIGNALS_BY_NAME[signal]
    gunzip = parse = convert = encode = 0.0
    items = request_bytes = parquet_bytes = 0
    for data in compressed:
        started = time.perf_counter()
        raw = gzip.decompress(data)
        unzipped = time.perf_counter()
        request = kind.request.FromString(raw)
        parsed = time.perf_counter()
        tables = kind.convert(request).tables
        converted = time.perf_counter()
        parquet_bytes += sum(_encode(table) for table in tables.values())
        encoded = time.perf_counter()
        gunzip += unzipped - started
        parse += parsed - unzipped
        convert += converted - parsed
        encode += encoded - converted
        items += sum(table.num_rows for table in tables.values())
        request_bytes += len(raw)
    return SignalLimit(
        signal=signal,
        items=items,
        gzip_bytes=sum(len(data) for data in compressed),
        request_bytes=request_bytes,
        gunzip_seconds=gunzip,
        parse_seconds=parse,
        convert_seconds=convert,
        encode_seconds=encode,
        parquet_bytes=parquet_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000, help="total spans (default 200k)")
    parser.add_argument("--spans-per-request", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.spans <= 0 or args.spans_per_request <= 0:
        raise SystemExit("--spans and --spans-per-request must be positive")
    started = time.perf_counter()
    payloads = build_payloads(args.spans, args.spans_per_request, args.seed)
    build_seconds = time.perf_counter() - started
    base = run_baseline(payloads)
    print(
        f"otel-delta in-process limit: {base.spans:,} spans, {args.spans_per_request} per "
        f"request, {os.cpu_count()} CPUs"
    )
    print(payloads_line(base, build_seconds), "", *rate_table([(rate_rows(base), [])]), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
