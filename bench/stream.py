"""Streaming throughput: `otel-delta stream --once` (Kafka → Spark → Delta) per executor core,
against the bridge's single-process ingest of the same spans, in one run.

The realistic corpus (bench/corpus.py) cut into messages of at most `--batch-size` spans (the
Collector's `kafka` exporter caps a message at 1 MB; 1,000 spans is ~280 KB) goes to a local
broker (the tests' KRaft broker, `make kafka`). Then, on the same messages:

- the stream on Spark `local[1]` and `local[2]`, each into a new lake with a new checkpoint:
  spans/s over the micro-batches' own time (the job's "batch N: ... X s" log lines: convert in
  the executors and commit), and over the whole command (JVM start and Kafka metadata included);
- the bridge (`otel-delta serve`, its defaults, ack = wal) sent the same requests over OTLP/gRPC
  by `--clients` connections: spans/s from the first send until the stopped bridge has committed
  everything.

Every run's stored rows are checked against the spans sent. On this 2-core machine `local[2]`
shares both cores with the driver and the broker; on a cluster each executor core has its own.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.common import REPO_ROOT, BridgeProcess, Payload, count_rows, drive, finish, workdir
from bench.corpus import build_corpus
from tests.kafka import kafka_broker

RESULTS = REPO_ROOT / "bench" / "results" / "stream-latest.json"
TOPIC = "bench_spans"
BATCH_LINE = re.compile(r"batch \d+: (\d+) message\(s\) .*; ([\d.]+) s \(.*\), \d+ rows/s")
STREAM_TIMEOUT = 1800.0


def spans_in(data: bytes) -> int:
    request = ExportTraceServiceRequest.FromString(data)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def run_stream(root: Path, bootstrap: str, cores: int, max_offsets: int | None) -> dict[str, Any]:
    lake = root / f"lake-local-{cores}"
    config = root / f"stream-{cores}.toml"
    limit = f"max_offsets_per_trigger = {max_offsets}\n" if max_offsets else ""
    config.write_text(
        f'[deltalake]\ntable_path = "{lake}"\n[spark]\nmaster = "local[{cores}]"\n'
        '[spark.conf]\n"spark.driver.memory" = "4g"\n'
        f'[stream]\nbootstrap_servers = "{bootstrap}"\ntraces_topic = "{TOPIC}"\n'
        f'metrics_topic = ""\nlogs_topic = ""\nadmin_endpoint = ""\n{limit}'
    )
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "stream", "--once", "--config", str(config)],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STREAM_TIMEOUT,
    )
    wall = time.perf_counter() - started
    lines = [line for line in child.stderr.splitlines() if BATCH_LINE.search(line)]
    batches = [(int(m[1]), float(m[2])) for m in map(BATCH_LINE.search, lines) if m]
    if child.returncode != 0:
        print(child.stderr[-4000:], file=sys.stderr)
    steady = batches[1:]  # the first batch also starts the Python workers and warms the JVM
    return {
        "cores": cores,
        "exit_code": child.returncode,
        "batches": len(batches),
        "messages": sum(m for m, _ in batches),
        "batch_seconds": round(sum(s for _, s in batches), 2),
        "first_batch_seconds": round(batches[0][1], 2) if batches else 0.0,
        "steady_messages": sum(m for m, _ in steady),
        "steady_seconds": round(sum(s for _, s in steady), 2),
        "wall_seconds": round(wall, 2),
        "rows": count_rows(lake, "spans") if child.returncode == 0 else 0,
        "batch_lines": [line.split(": ", 1)[-1] for line in lines],
    }


def _rate(items: float, seconds: float) -> int:
    return round(items / seconds) if seconds > 0 else 0


def run_bridge(root: Path, payloads: list[Payload], clients: int) -> dict[str, Any]:
    path = root / "bridge"
    path.mkdir()
    server = BridgeProcess(path, flush_interval=10.0, convert_workers=0, native="auto")
    try:
        port = server.wait_for_port()
        started = time.perf_counter()
        ingest = drive(port, payloads, clients, max_seconds=600)
    except BaseException:
        server.kill()
        raise
    code = server.stop()  # commits what the WAL holds, then exits
    seconds = time.perf_counter() - started
    return {
        "clients": clients,
        "exit_code": code,
        "acked": ingest.spans_acked,
        "errors": ingest.errors,
        "seconds": round(seconds, 2),
        "acked_seconds": round(ingest.seconds, 2),
        "rows": count_rows(server.lake, "spans"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=20_000, help="corpus traces")
    parser.add_argument("--batch-size", type=int, default=1000, help="spans per Kafka message")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the topic")
    parser.add_argument(
        "--max-offsets", type=int, default=40, help="messages per micro-batch (0: all in one)"
    )
    parser.add_argument("--clients", type=int, default=4, help="bridge connections")
    args = parser.parse_args()

    corpus = build_corpus(args.traces, batch_size=args.batch_size)
    payloads = [Payload(data, spans_in(data)) for data in corpus.traces]
    spans = sum(p.spans for p in payloads)
    message_bytes = sum(len(p.data) for p in payloads)
    print(f"{spans:,} spans in {len(payloads)} messages ({message_bytes / len(payloads):,.0f} B)")
    runs: list[dict[str, Any]] = []
    with workdir("stream-") as root:
        with kafka_broker(root / "kafka") as kafka:
            kafka.create_topic(TOPIC, partitions=args.partitions)
            kafka.produce(TOPIC, [p.data for p in payloads])
            for cores in (1, 2):
                run = run_stream(root, kafka.bootstrap_servers, cores, args.max_offsets or None)
                per_message = spans / len(payloads)
                run["spans_per_second"] = _rate(spans, run["batch_seconds"])
                run["steady_spans_per_second"] = _rate(
                    run["steady_messages"] * per_message, run["steady_seconds"]
                )
                run["steady_spans_per_second_per_core"] = round(
                    run["steady_spans_per_second"] / cores
                )
                run["spans_per_second_wall"] = _rate(spans, run["wall_seconds"])
                runs.append(run)
                print(
                    f"stream local[{cores}]: {run['steady_spans_per_second']:,} spans/s after the "
                    f"first batch ({run['steady_spans_per_second_per_core']:,} per core); "
                    f"{run['spans_per_second']:,} over all {run['batches']} batches "
                    f"({run['batch_seconds']} s, the first {run['first_batch_seconds']} s); "
                    f"{run['spans_per_second_wall']:,} over {run['wall_seconds']} s wall"
                )
        bridge = run_bridge(root, payloads, args.clients)
    bridge["spans_per_second"] = round(spans / bridge["seconds"])
    print(
        f"bridge ({args.clients} clients): {bridge['spans_per_second']:>9,} spans/s stored "
        f"({bridge['seconds']} s, first send to committed)"
    )
    problems = [
        f"stream local[{r['cores']}]: {r['rows']} rows, {spans} spans sent, exit {r['exit_code']}"
        for r in runs
        if r["rows"] != spans or r["exit_code"] != 0 or r["messages"] != len(payloads)
    ]
    if bridge["rows"] != spans or bridge["exit_code"] != 0 or bridge["errors"]:
        problems.append(
            f"bridge: {bridge['rows']} rows, {spans} spans sent, errors {bridge['errors']}, "
            f"exit {bridge['exit_code']}"
        )
    return finish(
        RESULTS,
        vars(args),
        problems,
        spans=spans,
        messages=len(payloads),
        message_bytes=message_bytes,
        stream=runs,
        bridge=bridge,
    )


if __name__ == "__main__":
    raise SystemExit(main())
