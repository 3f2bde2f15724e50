"""The one retry loop and its backoff schedule (otel_delta/retry.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otel_delta.buffer.group_commit import FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS
from otel_delta.errors import CommitError
from otel_delta.retry import backoff, retrying


def test_backoff_doubles_from_the_first_failure_up_to_its_cap() -> None:
    assert [backoff(n, 0.05) for n in (1, 2, 3)] == [0.1, 0.2, 0.4]
    # the group commit's schedule: a failed table's retries wait 2, 4, 8, 16, then 30 s
    waits = [backoff(n, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS) for n in range(1, 7)]
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def append_retried(run: Callable[[], int], attempts: int, **options: Any) -> int:
    """`retrying` as a table append uses it: OSError retried, CommitError when it gives up."""
    return retrying(
        run,
        attempts=attempts,
        retry_on=(OSError,),
        what="an append",
        give_up=lambda exc, n: CommitError(f"gave up after {n}: {exc}"),
        base_delay=0.0,
        **options,
    )


def test_retrying_retries_then_gives_up_with_our_error() -> None:
    calls: list[int] = []
    dropped: list[int] = []

    def run() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("store hiccup")
        return 7

    assert append_retried(run, 3, before_retry=lambda: dropped.append(1)) == 7
    assert len(calls) == 3 and len(dropped) == 2

    def never() -> int:
        raise OSError("store down")

    with pytest.raises(CommitError, match="gave up after 2: store down") as error:
        append_retried(never, 2)
    assert isinstance(error.value.__cause__, OSError)
