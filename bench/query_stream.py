"""How much memory does a streamed query hold in the bridge while its reader is slow?

The ConnectorService's Query streams a table as Arrow IPC in 1 MiB messages. A reader that
takes its time (a notebook on a slow link) must not make the bridge hold the result: this
bench appends `--spans` spans to a lake (bench.trace_lookup's generator, through the
connector's bulk_insert), starts `otel-delta serve` on it with the ConnectorService, and
streams the whole spans table twice, each in a bridge of its own: to a fast reader, and to a
slow one (HTTP/2 window left at 64 KiB, `--pause` seconds after each message). Per reader: the
bridge's peak RSS above its RSS before the query, the bytes streamed, and the seconds taken.
`--baseline-source DIR` streams the same to a bridge run from another source tree (e.g. a
`git worktree` of an older commit), in the same run, as the baseline. Run from the repository
root:

    .venv/bin/python -m bench.query_stream --spans 1000000
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil

from bench.common import RESULTS_DIR, BridgeProcess, finish, workdir
from bench.trace_lookup import span_batch
from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.remote.protocol import generated

RESULTS = RESULTS_DIR / "query-stream-latest.json"
TOKEN = "bench-token"
TOKEN_ENV = "OTEL_DELTA_BENCH_CONNECTOR_TOKEN"
SPANS_PER_COMMIT = 100_000


def build_lake(root: Path, spans: int) -> int:
    """`spans` spans in `root`/spans, one commit per SPANS_PER_COMMIT; the rows stored."""
    lake = DeltaLakeConnector(DeltaConfig.for_path(root))
    table = lake.get_or_create_table("spans")
    rng = np.random.default_rng(7)
    for start in range(0, spans, SPANS_PER_COMMIT):
        batch, _ = span_batch(rng, min(SPANS_PER_COMMIT, spans - start))
        table.bulk_insert(batch)
    return lake.table("spans").statistics().rows


def connector_port(bridge: BridgeProcess) -> int:
    """The ConnectorService's port, from the bridge's log line."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in list(bridge.log_tail):
            found = re.search(r"ConnectorService listening on [\d.]+:(\d+)", line)
            if found:
                return int(found.group(1))
        time.sleep(0.1)
    raise SystemExit("the ConnectorService did not start:\n" + "\n".join(bridge.log_tail))


def stream(port: int, pause: float, slow: bool) -> dict[str, Any]:
    """Read the whole spans table through Query; bytes, messages and seconds."""
    options = [("grpc.max_receive_message_length", 8 << 20)]
    if slow:
        options.append(("grpc.http2.bdp_probe", 0))  # the window stays at 64 KiB
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
    pb, pb_grpc = generated()
    stub = pb_grpc.ConnectorServiceStub(channel)
    metadata = [("authorization", f"Bearer {TOKEN}")]
    started = time.perf_counter()
    size = messages = 0
    for chunk in stub.Query(pb.QueryRequest(table="spans"), metadata=metadata, timeout=3600):
        size += len(chunk.data)
        messages += 1
        if slow:
            time.sleep(pause)
    channel.close()
    return {"bytes": size, "messages": messages, "seconds": round(time.perf_counter() - started, 1)}


def one_run(tmp: Path, source: Path | None, slow: bool, pause: float) -> dict[str, Any]:
    """A bridge on the lake (run from `source`, or this tree), one Query read to its end."""
    run_dir = tmp / f"run-{'baseline' if source else 'tree'}-{'slow' if slow else 'fast'}"
    run_dir.mkdir()
    (run_dir / "lake").symlink_to(tmp / "lake")
    bridge = BridgeProcess(
        run_dir,
        flush_interval=1.0,
        convert_workers=0,
        native="auto",
        source=source,
        extra_config=(
            f'[connector_service]\nenabled = true\nendpoint = "127.0.0.1:0"\n'
            f'token_env = "{TOKEN_ENV}"\n'
        ),
        env={TOKEN_ENV: TOKEN},
    )
    try:
        bridge.wait_for_port()
        port = connector_port(bridge)
        time.sleep(1.0)  # settled: the RSS before the query
        idle = psutil.Process(bridge.proc.pid).memory_info().rss
        bridge.stats.peak_rss_bytes = idle
        read = stream(port, pause, slow)
        peak = bridge.stats.peak_rss_bytes
    finally:
        bridge.stop()
    return {**read, "idle_rss_mib": idle / 2**20, "peak_over_idle_mib": (peak - idle) / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--pause", type=float, default=0.02, help="slow reader: s per message")
    parser.add_argument("--baseline-source", type=Path, help="a source tree to compare with")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    problems: list[str] = []
    with workdir(prefix="query-stream-") as tmp:
        rows = build_lake(tmp / "lake", args.spans)
        sources: dict[str, Path | None] = {"tree": None}
        if args.baseline_source:
            sources["baseline"] = args.baseline_source.resolve()
        for reader in ("fast", "slow"):
            for name, source in sources.items():
                run = one_run(tmp, source, reader == "slow", args.pause)
                results[f"{name}, {reader} reader"] = run
                print(f"{name}, {reader} reader: {json.dumps(run)}", flush=True)
    sizes = {run["bytes"] for run in results.values()}
    if len(sizes) != 1:
        problems.append(f"the runs streamed different sizes: {sorted(sizes)}")
    print(f"{rows} spans, {sizes.pop() / 2**20:.0f} MiB of Arrow IPC per read")
    for name, run in results.items():
        print(
            f"  {name:24} peak RSS over idle {run['peak_over_idle_mib']:7.0f} MiB, "
            f"{run['seconds']:6.1f} s"
        )
    config = {"spans": args.spans, "pause": args.pause, "baseline": str(args.baseline_source)}
    return finish(RESULTS, config, problems, rows=rows, runs=results)


if __name__ == "__main__":
    raise SystemExit(main())
