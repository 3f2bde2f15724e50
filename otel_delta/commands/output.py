"""Every CLI result is printed here: an Arrow table or a list of records as table, JSON or CSV."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

Format = Literal["table", "json", "csv"]
FORMATS: tuple[Format, ...] = ("table", "json", "csv")
MAX_CELL = 60


def records(value: Any) -> list[dict[str, Any]]:
    """Rows from an Arrow table, a dataclass (or list of them), a mapping or a list of dicts."""
    if isinstance(value, pa.Table | pa.RecordBatch):
        # maps as objects, an empty one too ({}, not []); a key a table holds twice (written
        # before the bridge kept one value per key) gives its last value
        return value.to_pylist(maps_as_pydicts="lossy")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [dataclasses.asdict(value)]
    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [r for item in value for r in records(item)]
    return [{"value": value}]


# JSON has no NaN or infinities: json.dumps writes the bare words NaN and Infinity, which
# strict parsers refuse (JSON.parse, Go, serde) or misread (jq 1.6: Infinity as 1.797e308, NaN
# as null). A metric value may be either, so they print as protobuf's JSON mapping, and OTLP/JSON,
# write them: as the strings "NaN", "Infinity" and "-Infinity".
def _non_finite(value: float) -> str:
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _plain(value: Any) -> Any:
    """JSON-able form: dates as ISO strings, maps (lists of pairs) as objects, bytes as hex,
    NaN and infinities as strings (`_non_finite`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return _non_finite(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _plain(v) for k, v in value}  # Arrow MAP → list of (key, value)
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    return value


def display_width(text: str) -> int:
    """Columns `text` takes on a terminal: East Asian wide and fullwidth characters take two,
    combining marks none (`len` misaligned `root-日本語` by three)."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
        for c in text
    )


def clip(text: str, width: int, mark: str = "") -> str:
    """`text` cut to at most `width` columns (ending in `mark` when cut)."""
    if display_width(text) <= width:
        return text
    room = width - display_width(mark)
    kept = ""
    for c in text:
        if display_width(kept + c) > room:
            break
        kept += c
    return kept + mark


def pad(text: str, width: int, right: bool = False) -> str:
    """`text` padded with spaces to `width` columns (on the left with `right`)."""
    fill = " " * max(0, width - display_width(text))
    return fill + text if right else text + fill


def _cell(value: Any) -> str:
    if value is None:
        return ""
    plain = _plain(value)
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return clip(text, MAX_CELL, "…")


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


def render(value: Any, fmt: Format = "table") -> str:
    """The text printed for a result (no trailing newline)."""
    rows = records(value)
    if fmt == "json":
        return "\n".join(
            json.dumps(_plain(r), ensure_ascii=False, default=str, allow_nan=False) for r in rows
        )
    columns = _columns(rows)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(
                [
                    ""
                    if row.get(c) is None
                    else (v if isinstance(v := _plain(row.get(c)), str) else json.dumps(v))
                    for c in columns
                ]
            )
        return out.getvalue().rstrip("\n")
    if not rows:
        return "(no rows)"
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [
        max(display_width(c), *(display_width(r[i]) for r in cells)) for i, c in enumerate(columns)
    ]
    lines = [
        "  ".join(pad(c, w) for c, w in zip(columns, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(pad(v, w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)
