"""The trace waterfall renderer: tree order, scaling, errors, events."""

from __future__ import annotations

import pyarrow as pa

from otel_delta.commands.waterfall import (
    BAR,
    ERROR_MARK,
    EVENT_TICK,
    RED,
    format_duration,
    render_waterfall,
)
from otel_delta.tables.schemas import SPANS

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def span(
    span_id, parent, name, start_ms, end_ms, service="svc", status="STATUS_CODE_OK", events=()
):
    return {
        "trace_id": "ab" * 16,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "service_name": service,
        "start_time_unix_nano": T0 + start_ms * MS,
        "duration_ns": (end_ms - start_ms) * MS,
        "status_code": status,
        "events": [{"time_unix_nano": T0 + e * MS, "name": "e"} for e in events],
    }


def table(*rows) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=SPANS)


def bars(lines: list[str]) -> list[str]:
    return [line.rsplit("|", 2)[1] for line in lines[2:]]


def test_tree_order_indentation_and_scaled_bars() -> None:
    # rows deliberately out of order: rendering must sort by tree, then start time
    spans = table(
        span("c2", "r", "db.query", 50, 100, service="db"),
        span("r", "", "GET /checkout", 0, 100, service="frontend"),
        span("c1", "r", "auth", 0, 25, service="auth"),
        span("g1", "c1", "cache", 10, 20, service="auth"),
    )
    lines = render_waterfall(spans, width=80)
    assert lines[0].startswith("trace: 4 spans, 100ms")
    names = [line[2:].split()[0] for line in lines[2:]]
    assert names == ["GET", "auth", "cache", "db.query"]
    assert lines[3][2:].startswith("  auth") and lines[4][2:].startswith("    cache")
    root, auth, cache, db = bars(lines)
    width = len(root)
    assert root == BAR * width  # the root spans the whole trace
    assert auth.index(BAR) == 0 and auth.count(BAR) == -(-width // 4)  # end rounds up
    assert cache.index(BAR) == width // 10
    assert db.index(BAR) == width // 2 and db.rstrip().endswith(BAR) and len(db) == width
    assert "50ms" in lines[5] and "db" in lines[5]


def test_errors_marked_without_color_and_red_with_color() -> None:
    spans = table(
        span("r", "", "root", 0, 10),
        span("x", "r", "fails", 2, 4, status="STATUS_CODE_ERROR"),
    )
    plain = render_waterfall(spans)
    assert "1 error(s)" in plain[0]
    assert plain[3].startswith(ERROR_MARK) and not plain[2].startswith(ERROR_MARK)
    assert not any(RED in line for line in plain)
    colored = render_waterfall(spans, color=True)
    assert colored[3].startswith(RED) and RED not in colored[2]


def test_events_are_ticks_and_tiny_spans_still_show() -> None:
    spans = table(
        span("r", "", "root", 0, 1000, events=(500,)),
        span("t", "r", "tiny", 999, 999),  # zero duration: one cell
    )
    root, tiny = bars(render_waterfall(spans, width=100))
    assert root[len(root) // 2] == EVENT_TICK and root.count(EVENT_TICK) == 1
    assert tiny.count(BAR) == 1 and tiny.rstrip().endswith(BAR)


def test_orphans_become_roots_and_cycles_do_not_hang() -> None:
    spans = table(
        span("a", "missing", "orphan", 5, 6),
        span("b", "c", "cycle-b", 1, 2),
        span("c", "b", "cycle-c", 3, 4),
    )
    lines = render_waterfall(spans)
    assert len(lines) == 2 + 3
    assert {line[2:].split()[0] for line in lines[2:]} == {"orphan", "cycle-b", "cycle-c"}


def test_empty_trace() -> None:
    assert render_waterfall(table()) == ["(no spans)"]


def test_format_duration() -> None:
    assert format_duration(850) == "850ns"
    assert format_duration(12_300) == "12.3µs"
    assert format_duration(4_560_000) == "4.56ms"
    assert format_duration(1_200_000_000) == "1.2s"


def test_wide_characters_keep_the_columns_aligned() -> None:
    from otel_delta.commands.output import display_width

    lines = render_waterfall(
        table(
            span("r", "", "root-日本語", 0, 100, service="grpcsvc"),
            span("c", "r", "child", 10, 20, service="サービス"),
        ),
        width=80,
    )
    bars_at = {display_width(line[: line.index("|")]) for line in lines[1:]}
    assert len(bars_at) == 1  # every bar starts in the same terminal column


def test_lines_fit_a_narrow_width() -> None:
    """Long names and services give up columns (clipped) before a line outgrows its width; at
    100 columns (the widest line once was 109) and down to MIN_WIDTH."""
    from otel_delta.commands.output import display_width
    from otel_delta.commands.waterfall import MIN_WIDTH

    spans = table(
        span("r", "", "GET /api/v1/" + "x" * 60, 0, 100, service="checkout-" + "y" * 30),
        span("c", "r", "SELECT orders " + "z" * 60, 10, 20, service="postgres-primary-eu"),
    )
    for width in (100, 70, MIN_WIDTH):
        lines = render_waterfall(spans, width=width)
        assert {display_width(line) for line in lines[2:]} == {width}, width
    wide = render_waterfall(spans, width=200)  # room: names and services up to their caps
    assert "GET /api/v1/" + "x" * 30 in wide[2]
