"""`otel-delta backfill` from the command line (delta-rs engine: no JVM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otel_delta.signals import SIGNALS_BY_NAME
from tests import corpus
from tests.backfill.collector import write_json_lines


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "otel_delta.cli", "backfill", *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)


def test_missing_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run(str(tmp_path / "absent.json"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no such file or directory" in done.stderr


def test_bad_format_is_a_usage_error(tmp_path: Path) -> None:
    done = run("--format", "csv", str(tmp_path))
    assert (
        done.returncode == 2 and "invalid choice" in done.stderr and "Traceback" not in done.stderr
    )


def test_backfill_prints_rows_per_table_and_is_idempotent(tmp_path: Path) -> None:
    path = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()] * 2)
    lake = tmp_path / "lake"
    env = {
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(lake),
        "OTEL_DELTA_DELTALAKE__OPERATIONS__ENGINE": "delta-rs",
    }
    rows = 2 * SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"].num_rows
    first = run("--format", "otlp-json", str(path), env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0].split() == ["logs", f"{rows:,}"]
    assert "1 file(s) loaded with delta-rs, 0 already loaded" in first.stdout
    second = run(str(path), env=env)
    assert (
        second.returncode == 0
        and "0 file(s) loaded with delta-rs, 1 already loaded" in second.stdout
    )
    assert DeltaTable(str(lake / "logs")).count() == rows


@pytest.mark.e2e
def test_unreachable_spark_master_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()])
    env = {
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(tmp_path / "lake"),
        "OTEL_DELTA_SPARK__MASTER": "nonsense://nowhere",
    }
    done = run(str(path), env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("otel-delta: ") and "nonsense://nowhere" in last
    assert "Traceback" not in done.stderr


def test_wrong_format_leaves_the_file_to_a_run_with_the_right_one(tmp_path: Path) -> None:
    """The user's trial: a JSON file forced as protobuf, then re-run with the format detected."""
    path = write_json_lines(tmp_path / "good.jsonl", [corpus.logs_request()])
    lake = tmp_path / "lake"
    env = {
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(lake),
        "OTEL_DELTA_DELTALAKE__OPERATIONS__ENGINE": "delta-rs",
    }
    wrong = run("--format", "otlp-proto", str(path), env=env)
    assert wrong.returncode == 0, wrong.stderr
    assert (
        "0 file(s) loaded with delta-rs, 0 already loaded, 1 not loaded (nothing could be "
        "decoded); 0 records, 0 item(s) rejected, 1 dead letter(s)"
    ) in wrong.stdout
    right = run(str(path), env=env)
    assert right.returncode == 0, right.stderr
    assert "1 file(s) loaded with delta-rs, 0 already loaded; 1 records" in right.stdout
    rows = SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"].num_rows
    assert DeltaTable(str(lake / "logs")).count() == rows


PAUSE_SECONDS = 6  # longer than one process may start after the other on a busy machine


def at_once(lake: Path, *file_sets: list[Path]) -> list[tuple[int, str, str]]:
    """`otel-delta backfill` of each file set into `lake` (delta-rs), all started at once and
    each paused once its files are planned (otel_delta/faults.py), so all would plan on the
    same ledger however slowly each starts; (exit code, stdout, stderr) of each run."""
    env = {
        **os.environ,
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(lake),
        "OTEL_DELTA_DELTALAKE__OPERATIONS__ENGINE": "delta-rs",
        "OTEL_DELTA_PAUSE_AT": f"backfill-planned:{PAUSE_SECONDS}",
    }
    argv = [sys.executable, "-m", "otel_delta.cli", "backfill"]
    runs = [
        subprocess.Popen(
            [*argv, *map(str, files)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for files in file_sets
    ]
    return [(run.wait(timeout=120), *run.communicate()) for run in runs]


def test_the_same_backfill_twice_at_once_counts_its_files_once(tmp_path: Path) -> None:
    """Two `otel-delta backfill` of the same file into one lake at once: the rows are stored
    once, and so are the counts: one run loaded the file, the other found it already loaded
    (both said "1 file(s) loaded", or the second failed on the ledger's commit: "Concurrent
    transaction failed"). Each pauses once its files are planned (otel_delta/faults.py), so
    both would plan on an empty ledger however slowly either starts; now the second waits for
    the first's turn (the backfill lease, backfill/ledger.py) and plans after it."""
    path = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()] * 2)
    lake = tmp_path / "lake"
    outcomes = at_once(lake, [path], [path])

    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    counts = sorted(out.splitlines()[-1].split(";")[0] for _, out, _ in outcomes)
    assert counts == [
        "0 file(s) loaded with delta-rs, 1 already loaded",
        "1 file(s) loaded with delta-rs, 0 already loaded",
    ], outcomes
    rows = 2 * SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"].num_rows
    assert DeltaTable(str(lake / "logs")).count() == rows
    assert DeltaTable(str(lake / "_backfill_files")).count() == 1


def logs_named(name: str) -> ExportLogsServiceRequest:
    """The corpus's logs, each record's event name telling which file it came from."""
    request = corpus.logs_request()
    for i, record in enumerate(request.resource_logs[0].scope_logs[0].log_records):
        record.event_name = f"{name}.{i}"
    return request


def test_overlapping_backfills_at_once_store_and_count_the_shared_file_once(
    tmp_path: Path,
) -> None:
    """Two `otel-delta backfill` at once into one lake, of a.json + b.json and of b.json +
    c.json: their batches differ, so the Delta txn ids did not stop both from committing b's
    rows (every record of b stored twice, and b counted loaded by both). Runs take turns: the
    second plans on the ledger the first recorded, waits for it (one line saying so), and
    loads only c (or a). Both pause once planned, as in the test above."""
    files = {
        name: write_json_lines(tmp_path / f"{name}.json", [logs_named(name)]) for name in "abc"
    }
    lake = tmp_path / "lake"
    outcomes = at_once(lake, [files["a"], files["b"]], [files["b"], files["c"]])

    assert [code for code, _, _ in outcomes] == [0, 0], outcomes
    per_file = len(logs_named("a").resource_logs[0].scope_logs[0].log_records)
    stored = DeltaTable(str(lake / "logs")).to_pyarrow_table(columns=["event_name"])
    assert Counter(stored.column(0).to_pylist()) == {
        f"{name}.{i}": 1 for name in "abc" for i in range(per_file)
    }, outcomes
    counts = sorted(out.splitlines()[-1].split(";")[0] for _, out, _ in outcomes)
    assert counts == [
        "1 file(s) loaded with delta-rs, 1 already loaded",
        "2 file(s) loaded with delta-rs, 0 already loaded",
    ], outcomes
    assert DeltaTable(str(lake / "_backfill_files")).count() == 3
    waits = sorted(err.count("waiting for another backfill") for _, _, err in outcomes)
    assert waits == [0, 1], outcomes
