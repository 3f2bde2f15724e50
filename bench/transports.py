"""OTLP/HTTP against OTLP/gRPC, and the cost of TLS, on the same bridge build, in one run.

Four runs of `otel-delta serve` (ack = wal, its default), each fed the same pre-serialized
trace requests by N client threads, each on its own keep-alive connection: gRPC, HTTP
(protobuf), gRPC over TLS, HTTP over TLS. Per run: spans/s acknowledged, Export p50/p99, and
server CPU per span; each run `--rounds` times, interleaved, and the median run of each
reported; then HTTP/gRPC and TLS/plain ratios (goal: HTTP ≥ 0.8x gRPC). The TLS
certificates come from a throwaway CA made with `openssl` (tests/certs.py). Run from the
repository root:

    .venv/bin/python -m bench.transports --spans 200000 --clients 8
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from bench.common import (
    RESULTS_DIR,
    BridgeProcess,
    Ingest,
    build_payloads,
    count_rows,
    drive,
    finish,
    grpc_sender,
    http_sender,
    run_problem,
    workdir,
)
from tests.certs import make_certs

RESULTS_FILE = RESULTS_DIR / "transports-latest.json"
RUNS = (("grpc", False), ("http", False), ("grpc", True), ("http", True))
HTTP_GOAL = 0.8


def run(
    transport: str, tls: bool, args: argparse.Namespace, payloads, certs_dir: Path
) -> dict[str, float | int | str]:
    certs = make_certs(certs_dir) if tls else None
    extra = (
        f'[receiver.tls]\ncert_file = "{certs.server_cert}"\nkey_file = "{certs.server_key}"\n'
        if certs
        else ""
    )
    with workdir() as path:
        server = BridgeProcess(path, args.flush_interval, 0, "auto", "wal", extra_config=extra)
        try:
            grpc_port = server.wait_for_port()
            port = grpc_port if transport == "grpc" else server.http_port
            make = grpc_sender if transport == "grpc" else http_sender
            sender = functools.partial(make, tls_ca=certs.ca if certs else None)
            cpu_before = server.cpu_seconds()
            ingest: Ingest = drive(port, payloads, args.clients, args.max_seconds, sender)
            server_cpu = server.cpu_seconds() - cpu_before
        except BaseException:
            server.kill()
            raise
        code = server.stop()
        rows = count_rows(server.lake)
    return {
        "transport": transport,
        "tls": tls,
        "spans_acked": ingest.spans_acked,
        "rows_in_table": rows,
        "seconds": round(ingest.seconds, 3),
        "spans_per_second": round(ingest.rate),
        "p50_ms": round(ingest.p50_ms, 2),
        "p99_ms": round(ingest.p99_ms, 2),
        "server_cpu_us_per_span": round(server_cpu / max(ingest.spans_acked, 1) * 1e6, 2),
        "client_cpu_us_per_span": round(
            ingest.client_cpu_seconds / max(ingest.spans_acked, 1) * 1e6, 2
        ),
        "errors": str(ingest.errors) if ingest.errors else "",
        "exit_code": code,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--spans-per-request", type=int, default=512, help="the SDK default")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--flush-interval", type=float, default=10.0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per configuration, interleaved; median"
    )
    args = parser.parse_args(argv)
    payloads = build_payloads(args.spans, args.spans_per_request, seed=7)
    rounds: dict[tuple[str, bool], list[dict]] = {key: [] for key in RUNS}
    with workdir("otel-delta-certs-") as certs_dir:
        for round_ in range(args.rounds):  # interleaved: drift on the machine hits all alike
            for transport, tls in RUNS:
                started = time.perf_counter()
                result = run(transport, tls, args, payloads, certs_dir / f"{transport}-{tls}")
                rounds[(transport, tls)].append(result)
                print(
                    f"round {round_ + 1} {transport}{' + TLS' if tls else ''}: "
                    f"{result['spans_per_second']:,} spans/s "
                    f"({time.perf_counter() - started:.0f} s)",
                    file=sys.stderr,
                )
    # per configuration: the run with the median rate
    results = [
        sorted(runs, key=lambda r: r["spans_per_second"])[len(runs) // 2]
        for runs in rounds.values()
    ]
    by = {(r["transport"], r["tls"]): r for r in results}
    ratios = {
        "http_over_grpc": by[("http", False)]["spans_per_second"]
        / max(by[("grpc", False)]["spans_per_second"], 1),
        "http_over_grpc_tls": by[("http", True)]["spans_per_second"]
        / max(by[("grpc", True)]["spans_per_second"], 1),
        "grpc_tls_over_plain": by[("grpc", True)]["spans_per_second"]
        / max(by[("grpc", False)]["spans_per_second"], 1),
        "http_tls_over_plain": by[("http", True)]["spans_per_second"]
        / max(by[("http", False)]["spans_per_second"], 1),
    }
    print(f"{'run':<12}{'spans/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'srv µs/span':>13}")
    for r in results:
        name = f"{r['transport']}{'+tls' if r['tls'] else ''}"
        print(
            f"{name:<12}{r['spans_per_second']:>10,}{r['p50_ms']:>9}{r['p99_ms']:>9}"
            f"{r['server_cpu_us_per_span']:>13}"
        )
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")
    found = (
        run_problem(f"{r['transport']}{'+tls' if r['tls'] else ''}", r)
        for runs in rounds.values()
        for r in runs
    )
    problems = [problem for problem in found if problem]
    if ratios["http_over_grpc"] < HTTP_GOAL:
        print(f"HTTP below the goal of {HTTP_GOAL}x gRPC", file=sys.stderr)
    return finish(
        RESULTS_FILE,
        vars(args),
        problems,
        runs=results,
        all_rounds={
            f"{t}{'+tls' if tls else ''}": [r["spans_per_second"] for r in runs]
            for (t, tls), runs in rounds.items()
        },
        ratios={k: round(v, 3) for k, v in ratios.items()},
    )


if __name__ == "__main__":
    sys.exit(main())
