"""A bounded commit race on one table: delta-rs appends vs Spark appends and OPTIMIZE.

delta-rs writers run as threads of the calling process (each with its own DeltaRsEngine, like
separate bridges); Spark runs in a child process (its own JVM, so each race can use a different
log store). Every append that returned without error is "acknowledged"; `check` then proves
from the table (delta-rs and Spark reads) and from the log files that each one survived.

Also a script, to measure how often the default store loses commits without widening:
    python -m tests.spark.commit_race --store default --pause-ms 0 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from otel_delta.engines import local_commit

REPO = Path(__file__).resolve().parents[2]
JAVA_SOURCE = Path(__file__).with_name("java") / "SlowRenameLocalFs.java"
DEFAULT_STORE = "io.delta.storage.HDFSLogStore"  # Delta 4.0's store for file:// paths
MARK = "RACE "  # prefix of the child's protocol lines on stdout (Spark logs go to stderr)
TABLE = "spans"
# a commit's temp file, as Delta's Hadoop stores and ours name it: .<version>.json.<uuid>.tmp
SPARK_TEMP = re.compile(r"^\.(\d{20})\.json\..+\.tmp$")
# shown by SlowRenameLocalFs while a rename sits between its existence check and the rename
RENAME_WINDOW = re.compile(r"^\.(\d{20})\.json\.rename-window$")


def span_hex(n: int) -> str:
    return f"{n:016x}"


def spark_span_id(k: int) -> str:
    return span_hex(0xF000_0000_0000_0000 + k)


# ---------------------------------------------------------------- the widened window (test only)


def build_slow_rename_jar(work_dir: Path) -> Path:
    """Compile tests/spark/java/SlowRenameLocalFs.java against Spark's Hadoop into a jar."""
    import zipfile

    import pyspark

    hadoop_api = next((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    classes = work_dir / "classes"
    subprocess.run(
        ["javac", "-d", str(classes), "-cp", str(hadoop_api), str(JAVA_SOURCE)],
        check=True,
        capture_output=True,
    )
    jar = work_dir / "slow-rename-localfs.jar"
    with zipfile.ZipFile(jar, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    return jar


def race_conf(slow_rename_jar: Path | None, pause_ms: int, store: str | None) -> dict[str, str]:
    """Spark settings for one race: optionally a paused rename, optionally another log store."""
    from otel_delta.spark.session import delta_jars

    conf: dict[str, str] = {}
    if slow_rename_jar is not None:
        conf["spark.jars"] = ",".join(str(p) for p in [*delta_jars(), slow_rename_jar])
        conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] = (
            "io.oteldelta.testing.SlowRenameLocalFs"
        )
        conf["spark.hadoop.otel.test.renamePauseMillis"] = str(pause_ms)
    if store is not None:
        conf["spark.delta.logStore.file.impl"] = store
    return conf


# ---------------------------------------------------------------- the Spark side (child process)


def spark_child(spec: dict) -> None:
    from pyspark.sql import functions as F

    from otel_delta.config import SparkSettings
    from otel_delta.spark.session import spark_session

    table, appends, seconds = spec["table"], spec["spark_appends"], spec["seconds"]
    spark = spark_session(SparkSettings(app_name="commit-race"), conf=spec["conf"])
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
    # the LogStore Delta really uses for this table (behind its scheme-delegating wrapper)
    store = delta_log.store().getDelegate(delta_log.logPath()).logStoreImpl()
    store_name = store.getClass().getName()
    seed = spark.read.format("delta").load(table).limit(1).cache()
    acked: list[list[str]] = []
    errors: list[str] = []
    optimizes: list[str] = []
    seconds_per_append: list[float] = []

    def append(k: int) -> None:
        started = time.monotonic()
        tag = f"race-spark-{k}"
        try:
            (
                seed.withColumn("span_id", F.lit(spark_span_id(k)))
                .write.format("delta")
                .mode("append")
                .option("userMetadata", tag)
                .save(table)
            )
            acked.append([spark_span_id(k), tag])
        except Exception as exc:
            errors.append(str(exc).splitlines()[0][:300])
        seconds_per_append.append(round(time.monotonic() - started, 2))
        print(f"spark append {k}: {seconds_per_append[-1]} s", file=sys.stderr, flush=True)

    append(0)  # warm the JVM up before the race starts
    emit("ready", {"store": store_name})
    finished = threading.Event()

    def optimize_now_and_then() -> None:
        while not finished.wait(spec["optimize_every_seconds"]):
            try:
                spark.sql(f"OPTIMIZE delta.`{table}`").collect()
                optimizes.append("ok")
            except Exception as exc:  # reported to the parent, which decides
                optimizes.append(str(exc).splitlines()[0][:300])

    optimizer = threading.Thread(target=optimize_now_and_then)
    optimizer.start()
    deadline = time.monotonic() + seconds
    for k in range(1, appends + 1):
        if time.monotonic() > deadline:
            break
        append(k)
    finished.set()
    optimizer.join()
    emit(
        "result",
        {
            "acked": acked,
            "errors": errors,
            "optimizes": optimizes,
            "seconds_per_append": seconds_per_append,
        },
    )

    sys.stdin.readline()  # the parent's writers have stopped: read the table back
    rows = spark.read.format("delta").load(table).select("span_id").collect()
    emit("ids", [r.span_id for r in rows])
    spark.stop()


def emit(kind: str, payload) -> None:
    print(f"{MARK}{kind} {json.dumps(payload)}", flush=True)


# ---------------------------------------------------------------- the race (parent process)


BRIDGE_CLIENTS = (local_commit.CLIENT, "delta-rs")


@dataclass
class Verdict:
    """Everything that went wrong; all empty means every acknowledged commit survived."""

    lost: list[str] = field(default_factory=list)  # acknowledged rows missing (delta-rs read)
    lost_in_spark: list[str] = field(default_factory=list)  # ... missing in the Spark read
    overwritten: list[int] = field(default_factory=list)  # delta-rs-acked versions not delta-rs's
    spark_tags_not_once: list[str] = field(default_factory=list)  # Spark commits not in the log
    gaps: list[int] = field(default_factory=list)  # missing commit files
    duplicates: list[str] = field(default_factory=list)  # rows stored twice

    @property
    def clean(self) -> bool:
        return not any(vars(self).values())


@dataclass
class RaceResult:
    store: str
    delta_rs_acked: dict[str, int]  # span id -> committed version
    spark_acked: dict[str, str]  # span id -> userMetadata tag
    spark_errors: list[str]
    delta_rs_errors: list[str]
    optimizes: list[str]
    snipes: list[str]
    seconds_per_spark_append: list[float]
    versions: int
    verdict: Verdict


def run_race(
    root: Path,
    conf: dict[str, str],
    spark_appends: int = 3,
    seconds: float = 60,
    background_writers: int = 1,
    background_interval: float = 1.0,
    background_appends: int = 15,
    snipes_at_most: int = 30,
    optimize_every_seconds: float = 4.0,
) -> RaceResult:
    """One race; returns what was acknowledged and what survived.

    Two kinds of delta-rs writers: `background_writers` append every `background_interval`
    seconds, and a "sniper" appends the moment Spark publishes a commit: when a Spark commit's
    temp file has appeared in _delta_log and then either its paused rename shows the window
    marker (Delta's check-then-rename store: it has checked, not yet renamed) or the temp is
    gone (published: our store links in one step, there is no window to wait for).
    """
    from otel_delta.convert import spans_to_arrow
    from otel_delta.engines import DeltaRsEngine
    from otel_delta.errors import CommitError
    from otel_delta.lakehouse import Lakehouse
    from tests.test_cli import one_span_request

    def rows(i: int):
        return spans_to_arrow(one_span_request(i)).tables[TABLE]

    table = root / TABLE
    seed_version = DeltaRsEngine(Lakehouse(str(root))).append(TABLE, rows(1))
    delta_rs_acked: dict[str, int] = {span_hex(2): seed_version}
    delta_rs_errors: list[str] = []
    snipes: list[str] = []
    stop = threading.Event()

    def append(writer: DeltaRsEngine, i: int, data) -> None:
        try:
            delta_rs_acked[span_hex(i + 1)] = writer.append(TABLE, data)
        except CommitError as exc:
            delta_rs_errors.append(str(exc))

    def append_now_and_then(w: int) -> None:
        writer = DeltaRsEngine(Lakehouse(str(root)))
        for k in range(background_appends):  # bounded, so Spark cannot be starved for ever
            if stop.wait(background_interval):
                return
            i = (w + 1) * 1_000_000 + k
            append(writer, i, rows(i))

    def snipe_spark_commits() -> None:
        writer = DeltaRsEngine(Lakehouse(str(root)))
        writer.open(TABLE)
        log_dir = table / "_delta_log"
        seen: set[str] = set()
        for k in range(snipes_at_most):
            i = 9_000_000 + k
            data = rows(i)
            reason = wait_for_publish(log_dir, seen)
            if reason is None:
                return
            snipes.append(reason)
            append(writer, i, data)

    def wait_for_publish(log_dir: Path, seen: set[str]) -> str | None:
        """Wait until Spark publishes a commit: its temp file is gone or its rename is paused."""
        pending: set[str] = set()
        while not stop.is_set():
            names = os.listdir(log_dir)
            temps = {m[1] for n in names if (m := SPARK_TEMP.match(n))}
            windows = {m[1] for n in names if (m := RENAME_WINDOW.match(n))}
            pending |= temps - seen
            seen |= temps
            if pending & windows:
                return f"{min(pending & windows)}:in-rename-window"
            if pending - temps:
                return f"{min(pending - temps)}:published"
            time.sleep(0.002)
        return None

    writers = [
        threading.Thread(target=append_now_and_then, args=(w,)) for w in range(background_writers)
    ]
    writers.append(threading.Thread(target=snipe_spark_commits))

    spec = {
        "table": str(table),
        "conf": conf,
        "spark_appends": spark_appends,
        "seconds": seconds,
        "optimize_every_seconds": optimize_every_seconds,
    }
    stderr = (root / "spark-child.log").open("w")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.commit_race", "--child", json.dumps(spec)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    lines = _line_reader(child)
    try:
        ready = _expect(lines, "ready", 240, root)
        for t in writers:
            t.start()
        result = _expect(lines, "result", seconds + 240, root)
        stop.set()
        for t in writers:
            t.join(60)
        assert child.stdin is not None
        child.stdin.write("verify\n")
        child.stdin.flush()
        spark_ids = _expect(lines, "ids", 120, root)
        child.wait(60)
    finally:
        stop.set()
        for t in writers:
            if t.is_alive():
                t.join(60)
        if child.poll() is None:
            child.kill()
        stderr.close()

    spark_acked = {sid: tag for sid, tag in result["acked"]}
    verdict, versions = check(table, delta_rs_acked, spark_acked, spark_ids)
    race = RaceResult(
        store=ready["store"],
        delta_rs_acked=delta_rs_acked,
        spark_acked=spark_acked,
        spark_errors=result["errors"],
        delta_rs_errors=delta_rs_errors,
        optimizes=result["optimizes"],
        snipes=snipes,
        seconds_per_spark_append=result["seconds_per_append"],
        versions=versions,
        verdict=verdict,
    )
    (root / "race-result.json").write_text(json.dumps(asdict(race), indent=1, sort_keys=True))
    return race


def check(
    table: Path,
    delta_rs_acked: dict[str, int],
    spark_acked: dict[str, str],
    spark_ids: list[str],
) -> tuple[Verdict, int]:
    """Compare what was acknowledged with what the table and its log hold."""
    from collections import Counter

    from deltalake import DeltaTable

    verdict = Verdict()
    read = DeltaTable(str(table)).to_pyarrow_table(columns=["span_id"])
    stored_ids = Counter(read["span_id"].to_pylist())
    acked = [*delta_rs_acked, *spark_acked]
    verdict.lost = sorted(sid for sid in acked if sid not in stored_ids)
    verdict.lost_in_spark = sorted(set(acked) - set(spark_ids))
    verdict.duplicates = sorted(sid for sid, n in stored_ids.items() if n > 1)
    verdict.duplicates += sorted(sid for sid, n in Counter(spark_ids).items() if n > 1)

    commits = {int(p.stem): p for p in (table / "_delta_log").glob("*.json") if p.stem.isdigit()}
    latest = max(commits)
    verdict.gaps = [v for v in range(latest + 1) if v not in commits]
    infos = {v: _commit_info(p) for v, p in commits.items()}
    verdict.overwritten = sorted(
        {
            v
            for v in delta_rs_acked.values()
            # the bridge's engine: its own local commits, or delta-rs's where it commits
            if not str(infos.get(v, {}).get("clientVersion", "")).startswith(BRIDGE_CLIENTS)
        }
    )
    tags = Counter(info.get("userMetadata") for info in infos.values())
    verdict.spark_tags_not_once = sorted(t for t in spark_acked.values() if tags[t] != 1)
    return verdict, latest + 1


def _commit_info(path: Path) -> dict:
    for line in path.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return action["commitInfo"]
    return {}


def _line_reader(child: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(MARK):
                lines.put(line[len(MARK) :].rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _expect(lines: queue.Queue, kind: str, timeout: float, root: Path):
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        line = None
    if line is None or not line.startswith(kind + " "):
        log = (root / "spark-child.log").read_text()[-3000:]
        raise RuntimeError(f"Spark child: expected {kind!r}, got {line!r}; stderr tail:\n{log}")
    return json.loads(line[len(kind) + 1 :])


# ---------------------------------------------------------------- measuring without a test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--store", choices=["default", "ours"], default="default")
    parser.add_argument("--pause-ms", type=int, default=0, help="widen the rename (0 = natural)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--spark-appends", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--keep", help="work in this directory and keep it")
    args = parser.parse_args()
    if args.child:
        spark_child(json.loads(args.child))
        return
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        jar = build_slow_rename_jar(Path(tmp)) if args.pause_ms else None
        conf = race_conf(jar, args.pause_ms, DEFAULT_STORE if args.store == "default" else None)
        for n in range(args.rounds):
            root = Path(tmp) / f"round-{n}"
            root.mkdir()
            r = run_race(root, conf, spark_appends=args.spark_appends, seconds=args.seconds)
            v = r.verdict
            print(
                f"round {n}: store={r.store} pause={args.pause_ms}ms "
                f"acked delta-rs={len(r.delta_rs_acked)} spark={len(r.spark_acked)} "
                f"versions={r.versions} optimize={r.optimizes.count('ok')}/{len(r.optimizes)} "
                f"snipes={len(r.snipes)} spark_errors={len(r.spark_errors)} "
                f"delta_rs_errors={len(r.delta_rs_errors)} | "
                f"lost={len(v.lost)} overwritten={len(v.overwritten)} gaps={len(v.gaps)} "
                f"spark_tags_not_once={len(v.spark_tags_not_once)} dup={len(v.duplicates)} | "
                f"spark s/append={r.seconds_per_spark_append}",
                flush=True,
            )


if __name__ == "__main__":
    main()
