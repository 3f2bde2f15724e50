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

from otel_delta.backfill import batches, ledger
from otel_delta.backfill.plan import PlannedFile
from otel_delta.backfill.stage import file_sha256
from otel_delta.faults import CRASH_EXIT_CODE
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


def stored_events(lake: Path) -> Counter:
    return Counter(
        DeltaTable(str(lake / "logs"))
        .to_pyarrow_table(columns=["event_name"])
        .column(0)
        .to_pylist()
    )


def records_of(*names: str) -> Counter:
    per_file = len(logs_named("a").resource_logs[0].scope_logs[0].log_records)
    return Counter({f"{name}.{i}": 1 for name in names for i in range(per_file)})


def lake_env(lake: Path, **more: str) -> dict[str, str]:
    return {
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(lake),
        "OTEL_DELTA_DELTALAKE__OPERATIONS__ENGINE": "delta-rs",
        **more,
    }


@pytest.mark.e2e  # about a minute: the stopped run's backfill lease has to run out
def test_a_backfill_stopped_after_its_table_commits_is_finished_by_a_run_of_other_files(
    tmp_path: Path,
) -> None:
    """A backfill of a.json + b.json killed after its table commits, before its ledger
    append; the next run is given a.json, b.json and a new c.json (a cron job over a folder
    the file exporter writes to). Its batch differs, so the txn ids let it commit a's and b's
    rows a second time (every record of a and b stored twice). It now finishes the stopped
    load first, as that load's batch, and then loads c. Before that, a load of the same two
    files had died before any commit (it stands here as its started rows): the stopped load
    is a second load of that batch, which the first's end must not hide."""
    files = {
        name: write_json_lines(tmp_path / f"{name}.json", [logs_named(name)]) for name in "abc"
    }
    lake = tmp_path / "lake"
    first = [PlannedFile(str(files[name]), file_sha256(str(files[name]))) for name in "ab"]
    batches.start(str(lake), ledger.batch_id([f.sha256 for f in first]), first, "auto")
    stopped = run(
        str(files["a"]),
        str(files["b"]),
        env=lake_env(lake, OTEL_DELTA_CRASH_AT="backfill-committed"),
    )
    assert stopped.returncode == CRASH_EXIT_CODE, stopped.stderr
    assert stored_events(lake) == records_of("a", "b")

    again = run(*map(str, files.values()), env=lake_env(lake))

    assert again.returncode == 0, again.stderr
    assert stored_events(lake) == records_of("a", "b", "c")
    assert "finishing an earlier backfill of 2 file(s)" in again.stderr
    assert "3 file(s) loaded with delta-rs, 0 already loaded" in again.stdout
    assert DeltaTable(str(lake / "_backfill_files")).count() == 3
    nothing_new = run(*map(str, files.values()), env=lake_env(lake))
    assert "0 file(s) loaded with delta-rs, 3 already loaded" in nothing_new.stdout
    assert "earlier backfill" not in nothing_new.stderr


@pytest.mark.e2e  # as above
def test_a_stopped_backfill_whose_files_are_gone_holds_them_back_until_given_again(
    tmp_path: Path,
) -> None:
    """The load of a.json + b.json stopped as above, and b.json is gone: a run given a.json and
    c.json loads c only (a's rows are stored already, and loading a in another batch would
    store them twice) and says why; once b.json is back, elsewhere, a run given it finishes
    the stopped load: each record stored once."""
    files = {
        name: write_json_lines(tmp_path / f"{name}.json", [logs_named(name)]) for name in "abc"
    }
    lake = tmp_path / "lake"
    stopped = run(
        str(files["a"]),
        str(files["b"]),
        env=lake_env(lake, OTEL_DELTA_CRASH_AT="backfill-committed"),
    )
    assert stopped.returncode == CRASH_EXIT_CODE, stopped.stderr
    moved = tmp_path / "elsewhere" / "b.json"
    moved.parent.mkdir()
    files["b"].rename(moved)

    without_b = run(str(files["a"]), str(files["c"]), env=lake_env(lake))

    assert without_b.returncode == 0, without_b.stderr
    assert "held back until a run is given them" in without_b.stderr
    assert str(files["b"]) in without_b.stderr
    assert "1 file(s) loaded with delta-rs, 0 already loaded, 1 held back" in without_b.stdout
    assert stored_events(lake) == records_of("a", "b", "c")

    with_b = run(str(moved), env=lake_env(lake))

    assert with_b.returncode == 0, with_b.stderr
    assert "2 file(s) loaded with delta-rs, 0 already loaded" in with_b.stdout
    assert stored_events(lake) == records_of("a", "b", "c")
    ledger = DeltaTable(str(lake / "_backfill_files")).to_pyarrow_table(columns=["file"])
    assert sorted(ledger.column(0).to_pylist()) == sorted(
        [str(files["a"]), str(moved), str(files["c"])]
    )


def test_a_started_load_that_committed_nothing_leaves_no_trace(tmp_path: Path) -> None:
    """A load recorded as started whose files are gone and that committed to no table (the
    process died before its first commit) holds nothing back: nothing of it is stored."""
    lake = tmp_path / "lake"
    gone = PlannedFile(str(tmp_path / "gone.json"), "0" * 64)
    batches.start(str(lake), ledger.batch_id([gone.sha256]), [gone], "auto")
    path = write_json_lines(tmp_path / "c.json", [logs_named("c")])

    done = run(str(path), env=lake_env(lake))

    assert done.returncode == 0, done.stderr
    assert "held back" not in done.stderr + done.stdout
    assert "1 file(s) loaded with delta-rs, 0 already loaded" in done.stdout
    assert stored_events(lake) == records_of("c")
