"""How the connector's operations have gone in this process: count, rows, latency, last error.

`DeltaLakeConnector.operation_metrics()` and `Table.operation_metrics()` return these figures
(the seed connector's `get_operation_metrics()`); the same observations go to the Prometheus
registry (`otel_delta_connector_operation_*`), which the bridge's `/metrics` serves.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from otel_delta.metrics import OPERATION_ROWS, OPERATION_SECONDS

# latencies kept per table and operation for the percentiles (the most recent ones)
WINDOW = 1024


@dataclass(frozen=True)
class OperationStats:
    """One operation's figures (over every table, or one table's)."""

    operation: str
    count: int  # calls, failed ones included
    errors: int
    rows: int  # rows written, deleted, read or rewritten, as the operation reports them
    p50_ms: float
    p99_ms: float
    last_error: str | None  # the last failure's message (None if it never failed)


class _Series:
    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.rows = 0
        self.latencies_ms: deque[float] = deque(maxlen=WINDOW)
        self.last_error: str | None = None
        self.last_error_at = 0.0


class OperationMetrics:
    """Thread-safe tally of operations, per (table, operation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}

    @contextmanager
    def measure(self, table: str, operation: str) -> Iterator[Callable[[int], None]]:
        """Time the block; call the yielded function with the rows it touched."""
        rows = [0]
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            yield lambda n: rows.__setitem__(0, int(n))
        except BaseException as exc:
            error = exc
            raise
        finally:
            seconds = time.perf_counter() - started
            self._record(table, operation, seconds, rows[0], error)

    def _record(
        self, table: str, operation: str, seconds: float, rows: int, error: BaseException | None
    ) -> None:
        outcome = "error" if error is not None else "ok"
        OPERATION_SECONDS.labels(table, operation, outcome).observe(seconds)
        OPERATION_ROWS.labels(table, operation).inc(rows)
        with self._lock:
            series = self._series.setdefault((table, operation), _Series())
            series.count += 1
            series.rows += rows
            series.latencies_ms.append(seconds * 1000)
            if error is not None:
                series.errors += 1
                series.last_error = str(error).splitlines()[0] if str(error) else repr(error)
                series.last_error_at = time.time()

    def snapshot(self, table: str | None = None) -> dict[str, OperationStats]:
        """Per operation: the figures of one table, or of all tables together."""
        with self._lock:
            grouped: dict[str, list[_Series]] = {}
            for (name, operation), series in self._series.items():
                if table is None or name == table:
                    grouped.setdefault(operation, []).append(series)
            return {op: _combine(op, parts) for op, parts in sorted(grouped.items())}


def _combine(operation: str, parts: list[_Series]) -> OperationStats:
    latencies = sorted(ms for series in parts for ms in series.latencies_ms)
    failed = [s for s in parts if s.last_error is not None]
    last = max(failed, key=lambda s: s.last_error_at).last_error if failed else None
    return OperationStats(
        operation=operation,
        count=sum(s.count for s in parts),
        errors=sum(s.errors for s in parts),
        rows=sum(s.rows for s in parts),
        p50_ms=round(_percentile(latencies, 0.50), 3),
        p99_ms=round(_percentile(latencies, 0.99), 3),
        last_error=last,
    )


def _percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def rows_of(result: Any) -> int:
    """The rows an operation's result reports (0 when it reports none)."""
    for attribute in ("upserted", "inserted", "deleted", "num_rows", "rows_affected"):
        value = getattr(result, attribute, None)
        if isinstance(value, int):
            return value
    return 0


def measured(operation: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a method of an object with `_metrics_scope() -> (OperationMetrics, table)`:
    each call is timed and counted under `operation`, with the rows its result reports."""

    def decorate(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            metrics, table = self._metrics_scope()
            with metrics.measure(table, operation) as rows:
                result = method(self, *args, **kwargs)
                rows(rows_of(result))
                return result

        return run

    return decorate
