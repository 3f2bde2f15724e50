"""Formatting of CLI results: table, JSON lines and CSV from Arrow and dataclasses."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from dataclasses import dataclass

import pyarrow as pa

from otel_delta.commands.output import render


def sample() -> pa.Table:
    return pa.table(
        {
            "name": ["a", "b,c"],
            "date": [dt.date(2026, 11, 20), None],
            "attributes": pa.array([[("k", "v")], []], pa.map_(pa.string(), pa.string())),
            "n": [1, 2],
        }
    )


def test_json_lines_are_plain_objects() -> None:
    lines = render(sample(), "json").splitlines()
    first = json.loads(lines[0])
    assert first == {"name": "a", "date": "2026-11-20", "attributes": {"k": "v"}, "n": 1}
    assert json.loads(lines[1])["date"] is None
    assert json.loads(lines[1])["attributes"] == {}  # an empty map is an object too


def test_csv_quotes_and_round_trips() -> None:
    rows = list(csv.DictReader(io.StringIO(render(sample(), "csv"))))
    assert [r["name"] for r in rows] == ["a", "b,c"]
    assert rows[0]["attributes"] == '{"k": "v"}' and rows[1]["date"] == ""


def test_table_aligns_columns() -> None:
    lines = render(sample(), "table").splitlines()
    assert lines[0].split() == ["name", "date", "attributes", "n"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].index("2026-11-20") == lines[0].index("date")


def test_dataclasses_and_empty() -> None:
    @dataclass
    class Stats:
        files: int
        rows: int

    assert json.loads(render(Stats(3, 10), "json")) == {"files": 3, "rows": 10}
    assert render([], "table") == "(no rows)"


def test_table_aligns_wide_characters_by_their_display_width() -> None:
    """`len` counted 日本語 as three columns where a terminal draws six: every column after
    it slid left on that row."""
    from otel_delta.commands.output import display_width

    lines = render([{"name": "root-日本語", "svc": "a"}, {"name": "plain", "svc": "b"}]).split("\n")
    starts = {display_width(line[: line.rindex(" ") + 1]) for line in (lines[0], *lines[2:])}
    assert len(starts) == 1  # `svc`, `a` and `b` begin in the same terminal column
    assert display_width("e\u0301") == 1  # a combining accent takes no column
    long = render([{"v": "界" * 100}]).split("\n")[2]
    assert display_width(long) <= 60 and long.endswith("…")
