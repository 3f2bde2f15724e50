"""`backfill` end to end on real files and real tables, on Spark (local) and on delta-rs."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Transaction, write_deltalake
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_delta import lakehouse
from otel_delta.backfill import batches, ledger
from otel_delta.backfill import plan as plan_module
from otel_delta.backfill.ledger import DEAD_LETTER_TABLE, LEDGER_TABLE
from otel_delta.backfill.run import BackfillReport, backfill
from otel_delta.backfill.stage import file_sha256
from otel_delta.config import Settings
from otel_delta.errors import StoreUnavailableError
from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.tables import TABLES
from tests import corpus
from tests.backfill.collector import otlp_json, truncated_gzip, write_json_lines, write_proto
from tests.backfill.test_cli import run as run_cli
from tests.engines.test_spark import canonical


def settings(root: Path, engine: str) -> Settings:
    return Settings(deltalake={"table_path": str(root), "operations": {"engine": engine}})


def inputs(folder: Path) -> dict[str, Path]:
    """The corpus in every layout the file exporter (or a later gzip) produces, plus a bad line."""
    folder.mkdir()
    traces, metrics, logs = corpus.trace_request(), corpus.metrics_request(), corpus.logs_request()
    bad = folder / "bad.json"
    bad.write_text(otlp_json(logs) + "\n" + '{"resourceLogs": "nope"}\n')
    return {
        "json": write_json_lines(folder / "traces.json", [traces]),
        "json_gz": write_json_lines(folder / "metrics.json.gz", [metrics], "gzip"),
        "proto": write_proto(folder / "all.pb", [traces, metrics, logs]),
        "proto_zstd": write_proto(folder / "logs.pb.zst", [logs], "zstd-per-message"),
        "bad": bad,
    }


def expected_rows() -> dict[str, pa.Table]:
    """What the receiver stores for the same requests (traces 2, metrics 2, logs 3 times)."""
    parts: dict[str, list[pa.Table]] = {}
    for signal, request, copies in (
        ("traces", corpus.trace_request(), 2),
        ("metrics", corpus.metrics_request(), 2),
        ("logs", corpus.logs_request(), 3),
    ):
        for name, table in SIGNALS_BY_NAME[signal].convert(request).tables.items():
            parts.setdefault(name, []).extend([table] * copies)
    return {name: pa.concat_tables(tables) for name, tables in parts.items()}


def table_rows(root: Path, name: str) -> pa.Table:
    return DeltaTable(str(root / name)).to_pyarrow_table()


def versions(root: Path) -> dict[str, int]:
    return {name: DeltaTable(str(root / name)).version() for name in TABLES}


def check_loaded(root: Path, report) -> None:
    expected = expected_rows()
    assert report.files_new == 5 and report.files_skipped == 0
    assert report.rows == {name: t.num_rows for name, t in sorted(expected.items())}
    assert report.dead_letters == 1
    for name, table in expected.items():
        assert canonical(table_rows(root, name)).equals(canonical(table)), name
    dead = table_rows(root, DEAD_LETTER_TABLE).to_pylist()
    assert [(Path(d["file"]).name, d["line"]) for d in dead] == [("bad.json", 2)]
    assert "not an OTLP/JSON" in dead[0]["reason"] and dead[0]["raw"].startswith(b'{"resourceLogs"')
    assert table_rows(root, LEDGER_TABLE).num_rows == 5


def test_delta_rs_backfill_loads_every_layout_once(tmp_path: Path) -> None:
    files = inputs(tmp_path / "in")
    root = tmp_path / "lake"
    stream = io.StringIO()
    report = backfill(settings(root, "delta-rs"), [str(tmp_path / "in")], progress_stream=stream)
    check_loaded(root, report)
    assert "5/5 files" in stream.getvalue()
    before = versions(root)
    again = backfill(settings(root, "delta-rs"), [str(p) for p in files.values()])
    assert again.files_new == 0 and again.files_skipped == 5 and again.rows == {}
    assert versions(root) == before


def test_a_ledger_commit_lost_to_the_same_load_at_once_counts_its_files_already_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same backfill run twice at once: both can find the load's transaction absent from
    the ledger; delta-rs commits one and refuses the other ("Concurrent transaction failed"),
    which failed that run (exit 1). It recorded nothing and added no rows: it succeeds, and
    counts the file already loaded. Here the other run, an `otel-delta backfill` process, runs
    whole right after this one found the ledger without the load. Runs take turns now (the
    backfill lease), so this befalls only a run that lost its lease (paused past its end):
    this one takes none, as one that lost it."""
    path = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()])
    root = tmp_path / "lake"
    env = {
        "OTEL_DELTA_DELTALAKE__TABLE_PATH": str(root),
        "OTEL_DELTA_DELTALAKE__OPERATIONS__ENGINE": "delta-rs",
    }
    check = lakehouse.holds_transaction
    other_runs: list[subprocess.CompletedProcess] = []

    def the_other_run_records_first(table: DeltaTable, transaction: Transaction) -> bool:
        held = check(table, transaction)
        if LEDGER_TABLE in table.table_uri and not other_runs:
            other_runs.append(run_cli(str(path), env=env))
        return held

    monkeypatch.setattr(lakehouse, "holds_transaction", the_other_run_records_first)
    monkeypatch.setattr(ledger, "one_run_at_a_time", lambda *_: contextlib.nullcontext())
    report = backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    other = other_runs[0]
    assert other.returncode == 0, other.stderr
    assert "1 file(s) loaded with delta-rs, 0 already loaded" in other.stdout
    assert report.files_new == 0 and report.files_skipped == 1 and report.rows == {}
    assert report.records == 0
    logs = SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"]
    assert table_rows(root, "logs").num_rows == logs.num_rows
    assert table_rows(root, LEDGER_TABLE).num_rows == 1


@pytest.mark.e2e
def test_spark_backfill_loads_every_layout_once_and_overlaps_add_only_new(
    tmp_path: Path, spark, monkeypatch
) -> None:
    files = inputs(tmp_path / "in")
    root = tmp_path / "lake"
    config = settings(root, "auto")  # auto: backfills run on Spark
    report = backfill(config, [str(p) for p in files.values()], session_factory=lambda: spark)
    assert report.engine == "spark"
    check_loaded(root, report)
    history = DeltaTable(str(root / "spans")).history()
    assert "Apache-Spark" in str(history[0].get("engineInfo"))
    assert len(history) == 2  # created, then ONE commit for all files

    before = versions(root)
    again = backfill(config, [str(tmp_path / "in")], session_factory=lambda: spark)
    assert again.files_new == 0 and again.files_skipped == 5
    assert versions(root) == before

    # an overlapping set: the known file is skipped, only the new one is loaded; the load dies
    # after its table commits, before recording its files (as in a crash)
    extra = write_json_lines(tmp_path / "in" / "more.json", [corpus.logs_request()])
    overlapping = [str(files["json"]), str(extra)]
    record = ledger.append_once

    def crash_on_ledger(root, name, *args):
        if name == LEDGER_TABLE:
            raise RuntimeError("crashed before recording the files")
        return record(root, name, *args)

    monkeypatch.setattr(ledger, "append_once", crash_on_ledger)
    with pytest.raises(RuntimeError, match="crashed"):
        backfill(config, overlapping, session_factory=lambda: spark)
    monkeypatch.undo()
    logs = SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"]
    assert table_rows(root, "logs").num_rows == 4 * logs.num_rows
    # the re-run finds the load's Delta txn id in the table and commits nothing twice
    rerun = backfill(config, overlapping, session_factory=lambda: spark)
    assert rerun.files_new == 1 and rerun.files_skipped == 1
    assert rerun.rows == {"logs": logs.num_rows} and rerun.skipped_commits == ["logs"]
    assert table_rows(root, "logs").num_rows == 4 * logs.num_rows
    assert table_rows(root, LEDGER_TABLE).num_rows == 6


@pytest.mark.parametrize("engine", ["delta-rs", pytest.param("auto", marks=pytest.mark.e2e)])
def test_a_file_with_nothing_decodable_is_not_recorded_so_the_right_format_loads_it(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """A wrong --format dead-letters the whole file; that must not mark it loaded forever."""
    path = write_json_lines(tmp_path / "good.jsonl", [corpus.trace_request()] * 2)
    root = tmp_path / "lake"
    config = settings(root, engine)
    session = request.getfixturevalue("spark") if engine == "auto" else None
    factory = (lambda: session) if session is not None else None

    def run(fmt: str) -> BackfillReport:
        return backfill(config, [str(path)], fmt, session_factory=factory, show_progress=False)

    for _ in range(2):  # the same mistake twice: still not loaded, its dead letter written once
        wrong = run("otlp-proto")
        assert (wrong.files_new, wrong.files_skipped, wrong.files_not_loaded) == (0, 0, 1)
        assert wrong.records == 0 and wrong.dead_letters == 1 and wrong.rows == {}
        dead = table_rows(root, DEAD_LETTER_TABLE).to_pylist()
        assert [(d["file_sha256"], d["offset"]) for d in dead] == [(file_sha256(str(path)), 0)]
        assert "truncated message" in dead[0]["reason"]
        assert not (root / LEDGER_TABLE).exists() or table_rows(root, LEDGER_TABLE).num_rows == 0

    right = run("auto")
    assert (right.files_new, right.files_skipped, right.files_not_loaded) == (1, 0, 0)
    spans = SIGNALS_BY_NAME["traces"].convert(corpus.trace_request()).tables["spans"]
    expected = canonical(pa.concat_tables([spans, spans]))
    assert canonical(table_rows(root, "spans")).equals(expected)
    assert table_rows(root, LEDGER_TABLE).column("file").to_pylist() == [str(path)]
    assert table_rows(root, DEAD_LETTER_TABLE).num_rows == 1

    again = run("auto")
    assert (again.files_new, again.files_skipped) == (0, 1)
    assert canonical(table_rows(root, "spans")).equals(expected)


def spans_request(count: int, first_id: int) -> ExportTraceServiceRequest:
    """`count` spans with ids from `first_id` on: large lines, told apart by their ids."""
    spans = [
        trace_pb2.Span(trace_id=i.to_bytes(16, "big"), span_id=i.to_bytes(8, "big"), name=f"s{i}")
        for i in range(first_id, first_id + count)
    ]
    return ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=spans)])]
    )


def test_a_gzip_file_cut_short_loads_its_whole_lines(tmp_path: Path) -> None:
    """A .json.gz copied while the exporter wrote it: its first line (100 spans) is whole."""
    first = otlp_json(spans_request(100, 1)).encode()
    second = otlp_json(spans_request(100, 101)).encode()
    path = tmp_path / "traces.json.gz"
    path.write_bytes(truncated_gzip(first + b"\n", second + b"\n"))
    root = tmp_path / "lake"
    report = backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    assert (report.files_new, report.records, report.dead_letters) == (1, 1, 1)
    assert report.rows == {"spans": 100}
    span_ids = table_rows(root, "spans").column("span_id").to_pylist()
    assert sorted(span_ids) == [i.to_bytes(8, "big").hex() for i in range(1, 101)]
    dead = table_rows(root, DEAD_LETTER_TABLE).to_pylist()
    assert [(d["file_sha256"], d["offset"], d["line"]) for d in dead] == [
        (file_sha256(str(path)), len(first) + 1, 2)
    ]
    assert "ended before the end-of-stream marker" in dead[0]["reason"]
    assert 0 < len(dead[0]["raw"]) < len(second) and second.startswith(dead[0]["raw"])
    # its whole lines are stored: the file is loaded, as a plain file with a bad line is
    assert table_rows(root, LEDGER_TABLE).column("file").to_pylist() == [str(path)]
    again = backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    assert (again.files_new, again.files_skipped) == (0, 1)


def test_a_file_that_changes_while_the_backfill_runs_is_loaded_once_by_a_later_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exporter appends to a file after the backfill hashed it and before it reads it: the
    run must not load it under the hash it no longer has, or a re-run of the same (now
    unchanged) file would store it again."""
    path = write_json_lines(tmp_path / "traces.json", [spans_request(10, 1)])
    more = otlp_json(spans_request(10, 11)) + "\n"
    planned_hash = plan_module.file_sha256

    def hash_then_grow(name: str) -> str:
        digest = planned_hash(name)
        with open(name, "a") as exporter:  # the exporter writes its next line
            exporter.write(more)
        return digest

    root = tmp_path / "lake"
    with monkeypatch.context() as patched:
        patched.setattr(plan_module, "file_sha256", hash_then_grow)
        first = backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    assert (first.files_new, first.files_not_loaded, first.dead_letters) == (0, 1, 1)
    assert first.rows == {}
    dead = table_rows(root, DEAD_LETTER_TABLE).to_pylist()
    assert [d["offset"] for d in dead] == [-1] and "changed while" in dead[0]["reason"]

    for _ in range(2):  # the file is closed now: loaded once, then skipped
        backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    span_ids = table_rows(root, "spans").column("span_id").to_pylist()
    assert sorted(span_ids) == [i.to_bytes(8, "big").hex() for i in range(1, 21)]


def test_a_zstd_file_cut_short_loads_its_whole_lines(tmp_path: Path) -> None:
    """The exporter's whole-stream zstd (or a .zst) copied while written, or left so by a crash:
    what its whole blocks hold loads, as for gzip. Decompressing the stream at once gave
    nothing ("unreadable file"), so no run could ever load its lines."""
    lines = [otlp_json(spans_request(2000, 1 + n * 2000)).encode() + b"\n" for n in range(4)]
    whole = pa.compress(b"".join(lines), "zstd", asbytes=True)
    path = tmp_path / "traces.json.zst"
    path.write_bytes(whole[: len(whole) * 3 // 4])
    root = tmp_path / "lake"
    report = backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
    assert report.files_new == 1 and report.dead_letters == 1
    assert 1 <= report.records < 4 and report.rows == {"spans": 2000 * report.records}
    span_ids = table_rows(root, "spans").column("span_id").to_pylist()
    whole_lines = range(1, 1 + 2000 * report.records)
    assert sorted(span_ids) == [i.to_bytes(8, "big").hex() for i in whole_lines]
    dead = table_rows(root, DEAD_LETTER_TABLE).to_pylist()
    assert len(dead) == 1 and "cut short" in dead[0]["reason"]
    assert dead[0]["line"] == report.records + 1


def test_a_store_failing_while_a_stopped_load_is_looked_at_names_its_table(
    tmp_path: Path,
) -> None:
    """Whether a stopped load committed is read from every telemetry table: a store failing
    on one of them is said of that table, not of `_backfill_batches`."""
    root = tmp_path / "lake"
    write_deltalake(str(root / "logs"), pa.table({"x": [1]}))
    gone = plan_module.PlannedFile(str(tmp_path / "gone.json"), "0" * 64)
    batches.start(str(root), ledger.batch_id([gone.sha256]), [gone], "auto")
    delta_log = root / "logs" / "_delta_log"
    delta_log.rename(root / "logs" / "elsewhere")
    delta_log.write_text("the store is down")
    path = write_json_lines(tmp_path / "logs.json", [corpus.logs_request()])
    with pytest.raises(StoreUnavailableError, match=r"^table 'logs' at "):
        backfill(settings(root, "delta-rs"), [str(path)], show_progress=False)
