"""Retry with exponential backoff: the one loop every retried Delta operation goes through, and
the one backoff schedule (`backoff`), which the group commit's per-table retries use too (they
cannot sleep in a loop: the buffer holds a failed table's groups until their time comes)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TypeVar

from otel_delta.errors import describe

log = logging.getLogger(__name__)
T = TypeVar("T")

BASE_DELAY_SECONDS = 0.05


def backoff(attempt: int, base: float, cap: float = math.inf) -> float:
    """The wait after failed attempt number `attempt` (1 = the first): base * 2**attempt, at
    most `cap`."""
    return min(cap, base * 2**attempt)


def retrying(
    run: Callable[[], T],
    *,
    attempts: int,
    retry_on: tuple[type[BaseException], ...],
    what: str,
    give_up: Callable[[BaseException, int], BaseException],
    before_retry: Callable[[], None] | None = None,
    base_delay: float = BASE_DELAY_SECONDS,
) -> T:
    """Call `run` up to `attempts` times while it raises one of `retry_on`.

    Between attempts: `before_retry` (e.g. drop a stale table handle), then a sleep of
    base_delay * 2**attempt. After the last failed attempt, `give_up(error, attempts)` is
    raised from the error: the caller decides which of our errors it becomes.
    """
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        try:
            return run()
        except retry_on as exc:
            if attempt == attempts:
                raise give_up(exc, attempt) from exc
            log.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, describe(exc))
            if before_retry is not None:
                before_retry()
            time.sleep(backoff(attempt, base_delay))
    raise AssertionError("unreachable")
