"""Ingest benchmark: how many spans/s the real bridge commits, against an in-process limit.

Two measurements on the same pre-built OTLP trace requests:

1. *Bridge*: `otel-delta serve` runs as its own process; N client threads send the requests
   as pre-serialized bytes over gRPC. An Export returns only after its rows are committed to
   Delta, so `spans acked / (last OK - first send)` is the committed throughput.
2. *Limit*: in this process, protobuf parse + Parquet zstd encode of the same data: roughly the
   least work any OTLP → Parquet bridge must do. Conversion is timed separately and excluded.

The ratio bridge/limit is what we track (target: 40%). The limit is `bench.limit`'s, the
conversion profile (`--profile-convert`) `bench.convert_profile`'s; the workload, the bridge
process and the clients are in `bench.common`. Run from the repository root:

    .venv/bin/python -m bench.ingest --spans 100000
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    MIB,
    REPO_ROOT,
    RESULTS_DIR,
    BridgeProcess,
    Fact,
    Ingest,
    Payload,
    Rate,
    ServerStats,
    build_payloads,
    count_rows,
    drive,
    git_commit,
    machine,
    rate_table,
    workdir,
    write_results,
)
from bench.convert_profile import profile_convert
from bench.limit import Baseline, baseline_json, payloads_line, rate_rows, run_baseline

RESULTS_FILE = RESULTS_DIR / "ingest-latest.json"
TARGET_RATIO = 0.40


@dataclass
class BridgeRun:
    ingest: Ingest
    server: ServerStats
    exit_code: int
    rows_in_table: int
    stop_seconds: float = 0.0  # SIGTERM → exit: the final commits (ack = wal: the backlog)

    @property
    def drained_rate(self) -> float:
        """Rows in Delta per second, from the first send until the bridge has exited."""
        total = self.ingest.seconds + self.stop_seconds
        return self.rows_in_table / total if total else 0.0


def run_bridge(
    payloads: Sequence[Payload],
    clients: int,
    max_seconds: float,
    flush_interval: float,
    convert_workers: int,
    native: str,
    ack: str | None,
    source: Path | None = None,
) -> BridgeRun:
    with workdir() as path:
        server = BridgeProcess(path, flush_interval, convert_workers, native, ack, source=source)
        try:
            port = server.wait_for_port()
            cpu_before = server.cpu_seconds()
            ingest = drive(port, payloads, clients, max_seconds)
            server.stats.ingest_cpu_seconds = server.cpu_seconds() - cpu_before
        except BaseException:
            server.kill()
            raise
        stopping = time.perf_counter()
        exit_code = server.stop()
        stop_seconds = time.perf_counter() - stopping
        if exit_code != 0:
            print("\n".join(server.log_tail), file=sys.stderr)
        return BridgeRun(ingest, server.stats, exit_code, count_rows(server.lake), stop_seconds)


def problems(run: BridgeRun) -> list[str]:
    """Everything that makes the figures untrustworthy; printed loudly, and exit code 1."""
    found = []
    ingest = run.ingest
    if run.rows_in_table != ingest.spans_acked:
        in_doubt = (
            f" ({ingest.spans_failed:,} spans got an error, e.g. a client timeout, and may "
            "have been committed anyway)"
            if ingest.spans_failed
            else ""
        )
        found.append(
            f"ROW COUNT MISMATCH: spans table has {run.rows_in_table:,} rows, "
            f"clients got OK for {ingest.spans_acked:,} spans{in_doubt}"
        )
    if ingest.errors:
        found.append(f"EXPORT ERRORS: {ingest.errors} ({ingest.spans_failed:,} spans)")
    if ingest.spans_rejected:
        found.append(f"REJECTED SPANS: {ingest.spans_rejected:,}")
    if ingest.truncated:
        found.append(f"TRUNCATED by --max-seconds: {ingest.spans_unsent:,} spans never sent")
    if run.exit_code != 0:
        found.append(f"BRIDGE EXIT CODE {run.exit_code} after SIGTERM")
    return found


def render(
    args: argparse.Namespace, base: Baseline, runs: dict[str, BridgeRun], build_seconds: float
) -> str:
    """The baseline, then one block per bridge run (one per `--native` mode compared)."""
    blocks: list[tuple[list[Rate], list[Fact]]] = []
    for mode, run in runs.items():
        ingest, server = run.ingest, run.server
        ratio = run.drained_rate / base.limit_rate if base.limit_rate else 0.0
        verdict = "meets target" if ratio >= TARGET_RATIO else "BELOW target"
        cores = server.ingest_cpu_seconds / ingest.seconds if ingest.seconds else 0.0
        per_span = server.ingest_cpu_seconds / ingest.spans_acked * 1e6 if ingest.spans_acked else 0
        native, ack = mode.split("/")
        what = f"ack = {ack}" if ack != "baseline" else f"baseline source {args.baseline_src}"
        rows = [
            (
                f"bridge process, native convert {native}, {what}, {ingest.clients} gRPC clients:",
                None,
                None,
            ),
            ("  acknowledged (first send -> last OK)", ingest.rate, ingest.seconds),
            (
                "  in Delta (first send -> bridge exited)",
                run.drained_rate,
                ingest.seconds + run.stop_seconds,
            ),
        ]
        facts = [
            (
                "  Export latency p50 / p99 / max",
                f"{ingest.p50_ms:,.0f} / {ingest.p99_ms:,.0f} / {ingest.max_ms:,.0f} ms",
            ),
            ("  server peak RSS (incl. children)", f"{server.peak_rss_bytes / MIB:,.0f} MiB"),
            (
                "  server CPU while ingesting",
                f"{server.ingest_cpu_seconds:,.1f} s ({cores:.2f} of {os.cpu_count()} cores busy,"
                f" {per_span:.1f} us per span)",
            ),
            ("  bench client CPU (all threads)", f"{ingest.client_cpu_seconds:,.1f} s"),
            (
                "  rows in spans table / spans acked",
                f"{run.rows_in_table:,} / {ingest.spans_acked:,}",
            ),
            ("  in Delta / limit", f"{ratio:.1%}  (target {TARGET_RATIO:.0%}: {verdict})"),
        ]
        blocks.append((rows, facts))
    lines = [
        f"otel-delta ingest benchmark: {base.spans:,} spans, {args.spans_per_request} per request, "
        f"{os.cpu_count()} CPUs, flush interval {args.flush_interval} s, "
        f"{args.convert_workers} convert workers, native convert {args.native}",
        payloads_line(base, build_seconds),
        "",
        *rate_table([(rate_rows(base), []), *blocks]),
    ]
    return "\n".join(lines)


def _bridge_json(run: BridgeRun, base: Baseline) -> dict[str, Any]:
    return {
        **asdict(run.ingest),
        "acked_spans_per_s": run.ingest.rate,
        "in_delta_spans_per_s": run.drained_rate,
        "stop_seconds": run.stop_seconds,
        "server_peak_rss_bytes": run.server.peak_rss_bytes,
        "server_cpu_seconds": run.server.cpu_seconds,
        "server_ingest_cpu_seconds": run.server.ingest_cpu_seconds,
        "rss_samples": run.server.samples,
        "server_exit_code": run.exit_code,
        "rows_in_table": run.rows_in_table,
        "ratio_in_delta_to_limit": run.drained_rate / base.limit_rate if base.limit_rate else 0,
    }


def results_json(
    args: argparse.Namespace,
    base: Baseline,
    runs: dict[str, BridgeRun],
    build_seconds: float,
    found: list[str],
    profile: str | None,
) -> dict[str, Any]:
    """`bridge` is the last run; `bridge_by_mode` has them all ("<native>/<ack>")."""
    run = list(runs.values())[-1]
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_commit": git_commit(),
        "machine": machine(platform=platform.platform()),
        "config": vars(args),
        "build_seconds": build_seconds,
        "baseline": baseline_json(base),
        "bridge": _bridge_json(run, base),
        "bridge_by_mode": {mode: _bridge_json(r, base) for mode, r in runs.items()},
        "ratio_in_delta_to_limit": run.drained_rate / base.limit_rate if base.limit_rate else 0,
        "target_ratio": TARGET_RATIO,
        "problems": found,
        "convert_profile": profile,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000, help="total spans (default 200k)")
    parser.add_argument("--spans-per-request", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8, help="concurrent gRPC clients")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=120.0,
        help="hard limit on the bridge phase; what is not sent by then is reported as unsent",
    )
    parser.add_argument("--flush-interval", type=float, default=1.0, help="bridge flush, s")
    parser.add_argument(
        "--convert-workers", type=int, default=2, help="bridge receiver.convert_workers"
    )
    parser.add_argument(
        "--native",
        choices=["auto", "on", "off", "both"],
        default="auto",
        help="bridge receiver.native_convert (auto: if built); both: run off, then on",
    )
    parser.add_argument(
        "--ack",
        choices=["wal", "commit", "both"],
        default="wal",
        help="bridge buffer.ack; both: run commit, then wal (same payloads, same run)",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also run an older source tree (before the write-ahead log) on the same payloads",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--profile-convert",
        type=int,
        default=0,
        metavar="N",
        help="also cProfile spans_to_arrow over the first N requests (top 15 by cumtime)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.spans <= 0 or args.spans_per_request <= 0 or args.clients <= 0:
        raise SystemExit("--spans, --spans-per-request and --clients must be positive")
    started = time.perf_counter()
    payloads = build_payloads(args.spans, args.spans_per_request, args.seed)
    build_seconds = time.perf_counter() - started
    base = run_baseline(payloads)
    profile = profile_convert(payloads[: args.profile_convert]) if args.profile_convert else None
    natives = ["off", "on"] if args.native == "both" else [args.native]
    acks = ["commit", "wal"] if args.ack == "both" else [args.ack]
    # (label, buffer.ack, source tree): this tree per ack mode, then the baseline tree if given
    modes: list[tuple[str, str | None, Path | None]] = [(ack, ack, None) for ack in acks]
    if args.baseline_src is not None:
        modes.append(("baseline", None, args.baseline_src))
    runs = {
        f"{native}/{label}": run_bridge(
            payloads,
            args.clients,
            args.max_seconds,
            args.flush_interval,
            args.convert_workers,
            native,
            ack,
            source,
        )
        for label, ack, source in modes
        for native in natives
    }
    found = [f"{mode}: {p}" for mode, run in runs.items() for p in problems(run)]
    print(render(args, base, runs, build_seconds))
    if profile:
        print(f"\nspans_to_arrow profile ({args.profile_convert} requests):\n{profile}")
    for problem in found:
        print(f"!!! {problem}", file=sys.stderr)
    write_results(results_json(args, base, runs, build_seconds, found, profile), RESULTS_FILE)
    print(f"results: {RESULTS_FILE.relative_to(REPO_ROOT)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
