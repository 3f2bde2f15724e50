"""Does the bridge stay inside `buffer.max_bytes` when many clients send large requests?

N clients (4, 16, 64) each send 4 MB trace requests (as a Collector's batch processor with a
large send_batch_size does), retrying a retryable answer after its delay like an exporter;
`buffer.max_bytes = 64 MiB`. The server's peak RSS (process tree, sampled every 50 ms) is
reported against the goal max_bytes + 300 MB, beside the same load on a baseline source tree
(`--baseline-src`, e.g. a checkout from before the change) in the same run.

    python -m bench.memory [--clients 4 16 64] [--baseline-src /tmp/otel-delta-old]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from bench.common import (
    MIB,
    RESULTS_DIR,
    BridgeProcess,
    build_payloads,
    finish,
    workdir,
)

RESULTS_FILE = RESULTS_DIR / "memory-latest.json"
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BYTES = 64 * MIB
GOAL_HEADROOM = 300 * 1024 * 1024
SPANS_PER_REQUEST = 8_000  # about 4 MB of realistic spans
SENDS_PER_CLIENT = 2


def client(port: int, requests: list[bytes], sends: int, tally: dict[str, int]) -> None:
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.use_local_subchannel_pool", 1), ("grpc.max_send_message_length", -1)],
    )
    export = channel.unary_unary(TRACE_EXPORT)
    for index in range(sends):
        raw = requests[index % len(requests)]
        while True:
            try:
                export(raw, timeout=120)
                tally["ok"] += 1
                break
            except grpc.RpcError as exc:
                tally[exc.code().name] = tally.get(exc.code().name, 0) + 1
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE,):
                    break
                time.sleep(0.5)  # an exporter's backoff (RetryInfo says 1 s by default)
    channel.close()


def run(clients: int, requests: list[bytes], source: Path | None) -> dict[str, Any]:
    ack = "wal" if source is None else None
    with workdir() as path:
        server = BridgeProcess(path, 1.0, 0, "auto", ack, MAX_BYTES, source)
        tallies: list[dict[str, int]] = [{"ok": 0} for _ in range(clients)]
        try:
            port = server.wait_for_port()
            threads = [
                threading.Thread(target=client, args=(port, requests, SENDS_PER_CLIENT, tally))
                for tally in tallies
            ]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - started
        except BaseException:
            server.kill()
            raise
        code = server.stop()
        answers: dict[str, int] = {}
        for tally in tallies:  # one per thread: no shared counter
            for key, count in tally.items():
                answers[key] = answers.get(key, 0) + count
        return {
            "source": str(source) if source else "this tree",
            "clients": clients,
            "answers": answers,
            "seconds": seconds,
            "peak_rss_bytes": server.stats.peak_rss_bytes,
            "exit_code": code,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args(argv)
    payloads = build_payloads(SPANS_PER_REQUEST * 8, SPANS_PER_REQUEST, seed=9)
    requests = [p.data for p in payloads]
    size = sum(map(len, requests)) / len(requests)
    sources = [None] if args.baseline_src is None else [args.baseline_src, None]
    runs = [run(n, requests, source) for source in sources for n in args.clients]
    goal = MAX_BYTES + GOAL_HEADROOM
    print(
        f"otel-delta memory under large requests: {size / MIB:.1f} MiB per request, "
        f"{SENDS_PER_CLIENT} per client, buffer.max_bytes = {MAX_BYTES // MIB} MiB, "
        f"goal: peak RSS <= {goal / MIB:.0f} MiB"
    )
    problems = []
    for r in runs:
        verdict = "within goal" if r["peak_rss_bytes"] <= goal else "OVER goal"
        print(
            f"  {r['source']:<24} {r['clients']:>3} clients  peak RSS "
            f"{r['peak_rss_bytes'] / MIB:>7,.0f} MiB  {verdict:<12} answers {r['answers']}  "
            f"{r['seconds']:.1f} s"
        )
        if r["exit_code"] != 0:
            problems.append(f"{r['source']} {r['clients']} clients: exit code {r['exit_code']}")
    config = {**vars(args), "baseline_src": str(args.baseline_src)}
    return finish(RESULTS_FILE, config, problems, request_bytes=size, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
