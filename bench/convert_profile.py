"""Conversion profile: where `spans_to_arrow` (the Python OTLP → Arrow converter) spends its time.

cProfile of `spans_to_arrow` alone over N pre-built trace requests (`bench.common`'s workload,
the same as the first N requests of `bench.ingest`; parsing done beforehand, not profiled), top
15 functions by cumulative time. `bench.ingest --profile-convert N` prints the same after its
table. Run from the repository root:

    .venv/bin/python -m bench.convert_profile --requests 40
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections.abc import Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.common import Payload, build_payloads
from otel_delta.convert import spans_to_arrow


def profile_convert(payloads: Sequence[Payload], top: int = 15) -> str:
    """cProfile of spans_to_arrow alone (parsing done beforehand), top functions by cumtime."""
    requests = [ExportTraceServiceRequest.FromString(p.data) for p in payloads]
    profiler = cProfile.Profile()
    profiler.enable()
    for request in requests:
        spans_to_arrow(request)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, metavar="N", help="requests profiled")
    parser.add_argument("--spans-per-request", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.requests <= 0 or args.spans_per_request <= 0:
        raise SystemExit("--requests and --spans-per-request must be positive")
    payloads = build_payloads(
        args.requests * args.spans_per_request, args.spans_per_request, args.seed
    )
    # warm-up, not profiled: the first call pays lazy imports and set-up (in bench.ingest the
    # baseline has already converted everything by the time it profiles)
    spans_to_arrow(ExportTraceServiceRequest.FromString(payloads[0].data))
    print(f"spans_to_arrow profile ({args.requests} requests):\n{profile_convert(payloads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
