"""`otel-delta` table commands on tables written by a real bridge."""

from __future__ import annotations

import csv
import getpass
import io
import json
import os
import pty
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.cli import main
from otel_delta.commands.waterfall import ERROR_MARK
from tests.commands.trace_data import TRACE_ID, known_trace, other_spans
from tests.corpus import logs_request
from tests.helpers import RunningBridge, ServeProcess, bridge_config, make_settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def lake(tmp_path: Path) -> tuple[Path, Path]:
    """A lakehouse written by a real bridge (4 commits to spans), and a config pointing at it."""
    lakehouse = tmp_path / "lake"
    bridge = RunningBridge(make_settings(lakehouse))
    try:
        traces, _, logs = bridge.stubs(bridge.channel())
        traces.Export(known_trace(), timeout=30)
        traces.Export(other_spans(10), timeout=30)
        traces.Export(other_spans(5, service="other"), timeout=30)
        logs.Export(logs_request(), timeout=30)
    finally:
        bridge.stop()
    config = tmp_path / "deltalake.toml"
    config.write_text(f'[deltalake]\ntable_path = "{lakehouse}"\n')
    return lakehouse, config


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def cli(config: Path, *argv: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", *argv, "--config", str(config)],
        capture_output=True,
        text=True,
        stdin=stdin,
        timeout=120,
    )


def test_tables_stats_history(lake, capsys) -> None:
    _, config = lake
    code, out, _ = run(capsys, "tables", "--config", str(config), "--format", "json")
    rows = {r["table"]: r for r in map(json.loads, out.splitlines())}
    assert code == 0 and set(rows) == {"spans", "logs"}
    assert rows["spans"]["rows"] == 3 + 10 + 5
    code, out, _ = run(capsys, "stats", "spans", "--config", str(config), "--format", "json")
    assert json.loads(out)["partitions"] == 5  # frontend, auth, db, noise, other
    code, out, _ = run(capsys, "history", "spans", "--config", str(config), "--format", "csv")
    history = list(csv.DictReader(io.StringIO(out)))
    assert [int(h["version"]) for h in history] == [3, 2, 1, 0]


def test_query_where_select_limit_and_time_travel(lake, capsys) -> None:
    _, config = lake
    args = ["query", "spans", "--config", str(config), "--format", "json"]
    code, out, _ = run(capsys, *args, "--where", "service_name = 'noise'", "--select", "name")
    names = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and sorted(r["name"] for r in names) == sorted(f"op{i}" for i in range(10))
    assert all(set(r) == {"name"} for r in names)
    code, out, _ = run(capsys, *args, "--limit", "2")
    assert len(out.splitlines()) == 2
    code, out, _ = run(capsys, *args, "--version", "1", "--limit", "0")
    assert len(out.splitlines()) == 3  # only the first commit: the known trace
    code, out, _ = run(capsys, "query", "spans", "--config", str(config), "--limit", "3")
    lines = out.splitlines()
    assert lines[0].startswith("service_name") and len(lines) == 2 + 3


def test_query_newest_first_and_a_search_whatever_the_case(lake, capsys) -> None:
    """What an SRE asks from the command line: the last rows first (`--order-by "... DESC"`),
    and names matched whatever their case (ILIKE)."""
    _, config = lake
    args = ["query", "spans", "--config", str(config), "--format", "json", "--select", "name"]
    where = "service_name = 'noise' AND name ILIKE 'OP%'"
    code, out, _ = run(capsys, *args, "--where", where, "--order-by", "name DESC")
    names = [json.loads(line)["name"] for line in out.splitlines()]
    assert code == 0 and names == sorted((f"op{i}" for i in range(10)), reverse=True)
    code, out, _ = run(capsys, *args, "--where", "name LIKE 'OP%'")
    assert code == 0 and out.strip() == ""  # LIKE keeps the case
    code, _, err = run(capsys, *args, "--order-by", "name sideways")
    assert code == 2 and "DESC" in err


def test_bad_input_is_one_line_exit_2(lake, capsys) -> None:
    _, config = lake
    for argv, needle in [
        (["query", "spans", "--where", "no_such_col = 1"], "no_such_col"),
        (["query", "spans", "--where", "DROP TABLE spans"], "predicate"),
        (["stats", "nope"], "nope"),
        (["trace", "xyz"], "32 hex"),
    ]:
        code, out, err = run(capsys, *argv, "--config", str(config))
        assert code == 2 and out == "", argv
        assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_trace_width_below_the_minimum_is_refused(lake, capsys) -> None:
    """It was taken and clamped: lines came out wider than asked, and wrapped."""
    _, config = lake
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", TRACE_ID, "--config", str(config), "--width", "30"])
    assert exit_info.value.code == 2
    assert "--width: 30 columns: a waterfall needs at least 50" in capsys.readouterr().err


def test_trace_waterfall(lake, capsys) -> None:
    _, config = lake
    code, out, _ = run(capsys, "trace", TRACE_ID, "--config", str(config), "--width", "100")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("trace: 3 spans, 100ms, 1 error(s)")
    body = lines[2:]
    assert [line.split()[1 if line.startswith(ERROR_MARK) else 0] for line in body] == [
        "GET",
        "authenticate",
        "SELECT",
    ]
    assert body[2].startswith(ERROR_MARK) and "db" in body[2]
    assert "\x1b[" not in out  # not a terminal: no colour codes
    code, out, _ = run(capsys, "trace", TRACE_ID, "--config", str(config), "--format", "json")
    assert [json.loads(x)["span_id"] for x in out.splitlines()] == [f"{i:016x}" for i in (1, 2, 3)]


def test_destructive_commands_refuse_without_terminal_or_yes(lake) -> None:
    lakehouse, config = lake
    for argv in (
        ["delete", "spans", "--where", "service_name = 'noise'"],
        ["vacuum", "spans", "--retention-hours", "0"],
        ["restore", "spans", "--version", "1"],
    ):
        result = cli(config, *argv)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == (
            f"otel-delta: refusing to {result.stderr.split('refusing to ')[1].strip()}"
        )
        assert "--yes" in result.stderr and "Traceback" not in result.stderr
    assert DeltaTable(str(lakehouse / "spans")).version() == 3  # nothing happened

    result = cli(config, "delete", "spans", "--where", "service_name = 'noise'", "--yes")
    assert result.returncode == 0, result.stderr
    spans = DeltaTable(str(lakehouse / "spans")).to_pyarrow_table()
    assert spans.num_rows == 8 and "noise" not in spans.column("service_name").to_pylist()
    result = cli(config, "restore", "spans", "--version", "3", "--yes", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().num_rows == 18
    # by timestamp, as restore(timestamp=...): the table as it was when the delete committed
    [deleted] = [c for c in DeltaTable(str(lakehouse / "spans")).history() if c["version"] == 4]
    moment = datetime.fromtimestamp(deleted["timestamp"] / 1000, UTC).isoformat()
    result = cli(config, "restore", "spans", "--timestamp", moment, "--yes")
    assert result.returncode == 0, result.stderr
    assert DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().num_rows == 8
    result = cli(config, "vacuum", "spans", "--retention-hours", "0", "--dry-run")
    assert result.returncode == 0  # a dry run deletes nothing: no confirmation needed


def _on_terminal(config: Path, answer: bytes, *argv: str) -> tuple[int, str]:
    """Run the CLI with a real pseudo-terminal as stdin and type `answer`."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "otel_delta.cli", *argv, "--config", str(config)],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.write(leader, answer)
        _out, err = proc.communicate(timeout=120)
    finally:
        os.close(leader)
        os.close(follower)
    return proc.returncode, err.decode()


def test_terminal_confirmation(lake) -> None:
    lakehouse, config = lake
    argv = ("delete", "spans", "--where", "service_name = 'other'")
    code, err = _on_terminal(config, b"n\n", *argv)
    assert code == 1 and "delete 5 row(s) from spans" in err and "aborted" in err
    assert DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().num_rows == 18
    code, err = _on_terminal(config, b"y\n", *argv)
    assert code == 0, err
    assert DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().num_rows == 13


def test_optimize_z_order(lake, capsys) -> None:
    lakehouse, config = lake
    key = [("service_name", "ascending"), ("span_id", "ascending")]
    before = DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().sort_by(key)
    code, out, err = run(
        capsys,
        "optimize",
        "spans",
        "--z-order",
        "trace_id",
        "span_id",  # as the README writes it; the flag repeated works too
        "--config",
        str(config),
        "--format",
        "json",
    )
    assert code == 0, err
    assert json.loads(out)["z_order"] == ["trace_id", "span_id"]
    after = DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().sort_by(key)
    assert after.equals(before)


def test_library_failure_is_one_line(lake, capsys) -> None:
    lakehouse, config = lake
    for data_file in (lakehouse / "spans").rglob("*.parquet"):
        if "_delta_log" not in data_file.parts:
            data_file.unlink()  # a damaged table: the log names files that are gone
    code, out, err = run(capsys, "query", "spans", "--config", str(config))
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("otel-delta: query failed:"), err


def test_hard_delete_from_the_command_line(lake, monkeypatch) -> None:
    lakehouse, config = lake
    monkeypatch.delenv("OTEL_DELTA_HASH_KEY", raising=False)
    argv = ("delete", "spans", "--partition-path", "service_name=other", "--hard", "--yes")
    result = cli(config, *argv)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().endswith(
        "is unset; hard deletes and redactions need a secret key for their keyed hashes"
    )
    assert DeltaTable(str(lakehouse / "spans")).version() == 3  # nothing happened

    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "cli-key")
    result = cli(config, *argv, "--actor", "ops@example.com", "--format", "json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["deleted"] == 5 and answer["hard"] is True and answer["files_purged"] >= 1
    spans = DeltaTable(str(lakehouse / "spans"))
    assert "other" not in spans.to_pyarrow_table().column("service_name").to_pylist()
    with pytest.raises(Exception):  # noqa: B017 - delta-rs: the version's log entry is gone
        DeltaTable(str(lakehouse / "spans"), version=3)
    audit = DeltaTable(str(lakehouse / "_audit")).to_pyarrow_table().to_pylist()
    assert [(r["actor"], r["rows_affected"]) for r in audit] == [("ops@example.com", 5)]
    assert "other" not in audit[0]["predicate"]  # the partition value is hashed


def test_redact_from_the_command_line(lake, monkeypatch) -> None:
    lakehouse, config = lake
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "cli-key")
    refused = cli(config, "redact", "spans", "--attribute", "service.name", "--mode", "mask")
    assert refused.returncode == 2 and "--yes" in refused.stderr  # destructive: asks first
    result = cli(
        config,
        *("redact", "spans", "--attribute", "service.name", "--mode", "mask", "--yes"),
        *("--where", "service_name = 'db'", "--actor", "cli-test", "--format", "json"),
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["rows_affected"] == 1 and answer["files_purged"] >= 1
    rows = DeltaTable(str(lakehouse / "spans")).to_pyarrow_table().to_pylist()
    resource = [dict(r["resource_attributes"])["service.name"] for r in rows]
    assert sorted(resource).count("***") == 1 and "frontend" in resource  # only the db span
    audit = DeltaTable(str(lakehouse / "_audit")).to_pyarrow_table().to_pylist()
    assert [(r["operation"], r["actor"]) for r in audit] == [("redact", "cli-test")]
    bad = cli(config, "redact", "spans", "--pattern", "(", "--yes")
    assert bad.returncode != 0 and "invalid pattern" in bad.stderr and "Traceback" not in bad.stderr


def test_a_reader_gone_early_ends_the_command_quietly(lake) -> None:
    """`otel-delta query … | head` where head has gone: a successful query used to end with
    "query failed: BrokenPipeError" and exit 1. Now it ends quietly, with SIGPIPE's exit code,
    as Unix tools do."""
    _, config = lake
    command = ["query", "spans", "--format", "json", "--config", str(config)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_delta.cli", *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the command has written anything
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert err.decode().strip() == ""


def test_ctrl_c_in_a_table_command_is_one_line(lake, capsys, monkeypatch) -> None:
    """Ctrl-C during a long query printed a Python traceback ending in KeyboardInterrupt."""
    import otel_delta.cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(otel_delta.cli, "run_command", interrupted)
    code, _, err = run(capsys, "query", "spans", "--config", str(lake[1]))
    assert code == 130 and err.strip() == "otel-delta: interrupted"


def test_no_config_and_no_lakehouse_says_where_it_looked(tmp_path: Path) -> None:
    """Run where there is no deltalake.toml, a command read the default ./lakehouse, found
    nothing and printed `(no rows)`, as if the bridge had stored nothing."""
    result = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "tables"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_DELTA_DELTALAKE")},
    )
    assert result.returncode == 0 and result.stdout.strip() == "(no rows)"
    assert result.stderr.strip() == (
        f"otel-delta: no deltalake.toml here and no lakehouse at {tmp_path / 'lakehouse'}: "
        "pass --config (the file the bridge runs with)"
    )


def strict_json(line: str) -> dict:
    """One line as a strict JSON parser (jq, JSON.parse, Go) takes it: no NaN or Infinity."""

    def refuse(word: str) -> None:
        raise ValueError(f"{word} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_query_json_of_nan_and_infinite_values_is_json(tmp_path: Path) -> None:
    """A gauge point sent as NaN or ±Inf (OTLP carries them; the Python SDK drops them, other
    senders do not) came out of `query --format json` as the bare words NaN / Infinity: strict
    parsers refused the line, and jq 1.6 read Infinity as 1.797e308 and NaN as null. They print
    as OTLP/JSON writes them, nested values (exemplars) too."""
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    values = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "1.5": 1.5}
    request = ExportMetricsServiceRequest()
    scope = request.resource_metrics.add().scope_metrics.add()
    gauge = scope.metrics.add(name="ratio").gauge
    for key, value in values.items():
        point = gauge.data_points.add(time_unix_nano=1_795_000_000_000_000_000, as_double=value)
        point.attributes.add(key="v").value.string_value = key
        point.exemplars.add(time_unix_nano=1_795_000_000_000_000_000, as_double=value)
    config = bridge_config(tmp_path)
    serve = ServeProcess(config)
    try:
        with grpc.insecure_channel(serve.endpoint) as channel:
            metrics_service_pb2_grpc.MetricsServiceStub(channel).Export(request, timeout=30)
    finally:
        assert serve.stop() == 0  # commits what it holds
    result = cli(
        config,
        "query",
        "metrics_gauge",
        "--select",
        "attributes,value_double,exemplars",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    rows = [strict_json(line) for line in result.stdout.splitlines()]
    printed = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "1.5": 1.5}
    assert {r["attributes"]["v"]: r["value_double"] for r in rows} == printed
    assert {r["attributes"]["v"]: r["exemplars"][0]["value_double"] for r in rows} == printed


def test_a_user_without_a_name_is_audited_by_its_uid(lake, monkeypatch, capsys) -> None:
    """Run as a uid with no passwd entry (OpenShift's random uid, `docker run --user 1000`
    with USER unset), getpass.getuser raises KeyError: every command, `serve` too, ended in
    that traceback while its parser was built (the --actor default). The parser asks no
    one; a hard delete without --actor is audited as the uid."""
    lakehouse, config = lake

    def no_name() -> str:
        raise KeyError("getpwuid(): uid not found: 54321")

    monkeypatch.setattr(getpass, "getuser", no_name)
    monkeypatch.setenv("OTEL_DELTA_HASH_KEY", "cli-key")
    argv = ("delete", "spans", "--partition-path", "service_name=other", "--hard", "--yes")
    code, _, err = run(capsys, *argv, "--config", str(config))
    assert code == 0, err
    audit = DeltaTable(str(lakehouse / "_audit")).to_pyarrow_table().to_pylist()
    assert [r["actor"] for r in audit] == [f"uid:{os.getuid()}"]
