"""`otel-delta backfill` from the command line (delta-rs engine: no JVM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

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
