"""A trace drawn as a waterfall: spans as a tree by parent, bars scaled to the trace.

Pure: an Arrow table of spans in, lines of text out, so the drawing is unit-tested without a
terminal. Errors (status ERROR) carry a ✗ marker, and are red when `color` is on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from otel_delta.commands.output import clip, display_width, pad

ERROR_STATUS = "STATUS_CODE_ERROR"
ERROR_MARK = "✗"
EVENT_TICK = "┃"
BAR = "█"
RED = "\x1b[31m"
DIM = "\x1b[2m"
RESET = "\x1b[0m"
# columns of a line besides the name, service and bar: the error mark, offset, duration, spaces
# and the bar's two edges
FIXED_COLUMNS = 24
NAME_COLUMNS = (8, 48)  # a span's name (indented by depth): at least, at most
SERVICE_COLUMNS = (8, 24)
BAR_MIN_COLUMNS = 10
# the narrowest waterfall whose every line fits its width (`trace --width` refuses less)
MIN_WIDTH = FIXED_COLUMNS + NAME_COLUMNS[0] + SERVICE_COLUMNS[0] + BAR_MIN_COLUMNS
NEEDED = ("span_id", "parent_span_id", "name", "start_time_unix_nano", "duration_ns")


@dataclass
class _Span:
    span_id: str
    parent_span_id: str
    name: str
    service: str
    start: int
    end: int
    error: bool
    events: list[int]
    children: list[_Span] = field(default_factory=list)


def format_duration(ns: int) -> str:
    """Short human duration: 850ns, 12.3µs, 4.56ms, 1.20s."""
    if ns < 1_000:
        return f"{ns}ns"
    for unit, scale in (("µs", 1_000), ("ms", 1_000_000)):
        if ns < scale * 1_000:
            return f"{ns / scale:.3g}{unit}"
    return f"{ns / 1e9:.3g}s" if ns < 100 * 1e9 else f"{ns / 1e9:.0f}s"


def _spans(spans: pa.Table) -> list[_Span]:
    missing = [c for c in NEEDED if c not in spans.column_names]
    if missing:
        raise ValueError(f"spans table lacks column(s) {missing}")
    rows = spans.to_pylist()
    out = []
    for row in rows:
        start = row["start_time_unix_nano"] or 0
        end = max(start + (row["duration_ns"] or 0), start)
        events = [e["time_unix_nano"] for e in row.get("events") or [] if e.get("time_unix_nano")]
        out.append(
            _Span(
                span_id=row["span_id"] or "",
                parent_span_id=row["parent_span_id"] or "",
                name=row["name"] or "",
                service=row.get("service_name") or "",
                start=start,
                end=end,
                error=row.get("status_code") == ERROR_STATUS,
                events=events,
            )
        )
    return out


def _tree(spans: list[_Span]) -> list[tuple[int, _Span]]:
    """Depth-first order, children by start time; spans whose parent is absent become roots."""
    by_id = {s.span_id: s for s in spans}
    roots = []
    for span in spans:
        parent = by_id.get(span.parent_span_id)
        if parent is None or parent is span:
            roots.append(span)
        else:
            parent.children.append(span)
    ordered: list[tuple[int, _Span]] = []
    seen: set[int] = set()

    def key(s: _Span) -> tuple[int, str]:
        return (s.start, s.span_id)

    stack = [(0, s) for s in sorted(roots, key=key, reverse=True)]
    while stack:
        depth, span = stack.pop()
        if id(span) in seen:  # a parent cycle in bad data: draw each span once
            continue
        seen.add(id(span))
        ordered.append((depth, span))
        stack.extend((depth + 1, c) for c in sorted(span.children, key=key, reverse=True))
    # spans only reachable through a cycle have no root: draw them flat at the end
    ordered.extend((0, s) for s in sorted(spans, key=key) if id(s) not in seen)
    return ordered


def _bar(span: _Span, t0: int, total: int, width: int) -> str:
    first = min(width - 1, (span.start - t0) * width // total)
    last = max(first + 1, min(width, -(-(span.end - t0) * width // total)))
    cells = [" "] * width
    for i in range(first, last):
        cells[i] = BAR
    for event in span.events:
        if t0 <= event <= t0 + total:
            cells[min(width - 1, (event - t0) * width // total)] = EVENT_TICK
    return "".join(cells)


def _column_widths(name: int, service: int, width: int) -> tuple[int, int, int]:
    """Columns of the name, the service and the bar in lines of `width` columns: names and
    services as wide as their widest (up to their caps) while the bar keeps its minimum; when
    that does not fit, both give up columns in turn (clipped, down to their minimums), so a
    narrow terminal gets lines of its width rather than lines that wrap."""
    name_w = max(NAME_COLUMNS[0], min(name, NAME_COLUMNS[1]))
    svc_w = max(SERVICE_COLUMNS[0], min(service, SERVICE_COLUMNS[1]))
    while FIXED_COLUMNS + name_w + svc_w + BAR_MIN_COLUMNS > width:
        if name_w > NAME_COLUMNS[0] and (name_w >= svc_w or svc_w == SERVICE_COLUMNS[0]):
            name_w -= 1
        elif svc_w > SERVICE_COLUMNS[0]:
            svc_w -= 1
        else:
            break
    return name_w, svc_w, max(BAR_MIN_COLUMNS, width - FIXED_COLUMNS - name_w - svc_w)


def render_waterfall(spans: pa.Table, *, width: int = 100, color: bool = False) -> list[str]:
    """The lines of a waterfall of one trace (a header, then one line per span)."""
    items = _spans(spans)
    if not items:
        return ["(no spans)"]
    t0 = min(s.start for s in items)
    total = max(max(s.end for s in items) - t0, 1)
    ordered = _tree(items)
    labels = [("  " * depth) + span.name for depth, span in ordered]
    name_w, svc_w, bar_w = _column_widths(
        max(display_width(label) for label in labels),
        max(display_width(s.service) for s in items),
        width,
    )
    errors = sum(s.error for s in items)
    header = (
        f"trace: {len(items)} spans, {format_duration(total)}"
        + (f", {errors} error(s) {ERROR_MARK}" if errors else "")
        + f"  ({BAR} span, {EVENT_TICK} event)"
    )
    lines = [
        header,
        f"  {pad('span', name_w)} {pad('service', svc_w)} {'offset':>8} {'duration':>8} |",
    ]
    for label, (_depth, span) in zip(labels, ordered, strict=True):
        mark = ERROR_MARK if span.error else " "
        line = (
            f"{mark} {pad(clip(label, name_w), name_w)} {pad(clip(span.service, svc_w), svc_w)} "
            f"{format_duration(span.start - t0):>8} {format_duration(span.end - span.start):>8} "
            f"|{_bar(span, t0, total, bar_w)}|"
        )
        if color and span.error:
            line = f"{RED}{line}{RESET}"
        lines.append(line)
    return lines
