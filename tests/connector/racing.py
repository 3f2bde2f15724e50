"""Another writer's commits landing right after an operation's own, without timing.

The connector's engine method (or delta-rs's schema change) is wrapped so that, once the
operation has committed and before its result is built, a second connector on the same
lakehouse (as the bridge would) appends to the table: the table's latest version is then that
append's, not the operation's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otel_delta.connector import DeltaConfig, DeltaLakeConnector
from otel_delta.engines import commit_log
from otel_delta.engines.data_files import table_filesystem
from tests.connector import data

APPENDS = 2  # commits of the other writer after the operation's


def append_elsewhere(table: Any, commits: int = APPENDS) -> None:
    """`commits` appends to `table`'s table by another connector (delta-rs), one commit each."""
    other = DeltaLakeConnector(DeltaConfig.for_path(Path(table.uri).parent), engine="delta-rs")
    for batch in range(commits):
        other.table(table.name).bulk_insert(
            data.spans_request(data.SERVICES[0], data.DAYS[0], 900 + batch)
        )


def appending_after(
    monkeypatch: pytest.MonkeyPatch, owner: Any, method: str, table: Any
) -> Callable[[], int]:
    """Make `owner.method` return only once another writer has appended to `table`; returns
    a function telling how many times it did."""
    original = getattr(owner, method)
    calls = [0]

    def then_append(*args: Any, **kwargs: Any) -> Any:
        outcome = original(*args, **kwargs)
        append_elsewhere(table)
        calls[0] += 1
        return outcome

    monkeypatch.setattr(owner, method, then_append)
    return lambda: calls[0]


def operation_at(table: Any, version: int) -> str:
    """The operation of the commit at `version`, from its log entry."""
    files = table_filesystem(table.uri, table.connector.storage_options, create=False)
    info = commit_log.commit_info(files, version)
    assert info is not None, f"no commit {version} in the log of {table.name}"
    return str(info.get("operation"))
