"""Commit infos read from a table's log files, each numbered by its file name.

delta-rs's `DeltaTable.history()` reads the newest commits first and then numbers them by
counting back from the latest version it sees afterwards: a commit landing in between shifts
every number (delta-io/delta-rs#4488). Here that showed as an append acknowledged with another
writer's version (a delta-rs append racing Spark's commits, tests/spark/test_commit_race.py),
and it would show as a history entry or an `as_of` version off by one under the bridge's
steady appends. A log entry's version is its file name, so reading the entries cannot
misnumber them.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pa_fs

from otel_delta.errors import CommitError, describe
from otel_delta.retry import retrying

COMMIT_FILE = re.compile(r"^\d{20}\.json$")
READ_ATTEMPTS = 4  # reads of the log after a commit, while they fail with an I/O error
READERS = 8  # concurrent reads: one object-store GET takes milliseconds, a local read micros
CHUNK = 64  # versions read before looking for the end of the log


def log_entry(version: int) -> str:
    """The path of a version's commit, relative to the table's root."""
    return f"_delta_log/{version:020d}.json"


def commit_info(filesystem: pa_fs.FileSystem, version: int) -> dict[str, Any] | None:
    """The commitInfo of `version` (empty when its commit has none); None when the log holds
    no such commit (not made yet, or removed with the expired log)."""
    try:
        with filesystem.open_input_stream(log_entry(version)) as entry:
            text = entry.read()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if b'"commitInfo"' in line:
            action = json.loads(line)
            if "commitInfo" in action:
                return dict(action["commitInfo"])
    return {}


def find_commit(
    filesystem: pa_fs.FileSystem, after: int, key: str, value: str, *, last: bool = False
) -> int | None:
    """The version of the first commit after `after` whose commitInfo holds `key` = `value`
    (a commit id of ours), None when no commit up to the latest does. With `last`, the last
    such commit: an operation that commits more than once tags each of its commits."""
    found = None
    version = after + 1
    while (info := commit_info(filesystem, version)) is not None:
        if info.get(key) == value:
            if not last:
                return version
            found = version
        version += 1
    return found


def own_commit(
    filesystem: pa_fs.FileSystem,
    after: int,
    key: str,
    commit_id: str,
    *,
    last: bool = False,
    attempts: int = READ_ATTEMPTS,
) -> int | None:
    """The version of the commit tagged `commit_id` in `key`, made on a snapshot of version
    `after` or later (`find_commit`): how every commit of ours learns its version, appends and
    the connector's operations, on either engine. Neither the table's latest version, which
    other writers' commits may already have passed, nor delta-rs's history, whose numbers
    shift when a commit lands while it reads. None when no commit carries the tag (the
    operation committed nothing). Read errors are retried; after the last, CommitError: the
    commit may well be in the table, so its caller must not simply run it again."""
    return retrying(
        lambda: find_commit(filesystem, after, key, commit_id, last=last),
        attempts=attempts,
        retry_on=(OSError,),
        what="reading the log after a commit",
        give_up=lambda exc, n: CommitError(
            f"commit {commit_id} was made, but its version could not be read from the log "
            f"after {n} attempts: {describe(exc)}"
        ),
    )


def history(
    filesystem: pa_fs.FileSystem, latest: int, limit: int | None = None
) -> list[dict[str, Any]]:
    """Commit infos from `latest` back (newest first), each with its `version`: `limit` of
    them, or every one the log still holds. Older commits whose files the log cleanup has
    removed end the list, as they end delta-rs's."""
    oldest = 0 if limit is None else max(0, latest - limit + 1)
    entries: list[dict[str, Any]] = []
    with ThreadPoolExecutor(READERS) as pool:
        for top in range(latest, oldest - 1, -CHUNK):  # a chunk at a time: stop at the gap
            versions = range(top, max(oldest, top - CHUNK + 1) - 1, -1)
            for version, info in zip(
                versions, pool.map(lambda v: commit_info(filesystem, v), versions), strict=True
            ):
                if info is None:
                    return entries
                info["version"] = version
                entries.append(info)
    return entries


def oldest_commit(filesystem: pa_fs.FileSystem, latest: int) -> int:
    """The oldest version whose commit the log still holds (the expired log's clean-up
    removes the oldest entries, so those it keeps run from this one to `latest`): a binary
    search, a dozen or so lookups however long the log."""
    low, high = 0, latest
    while low < high:
        middle = (low + high) // 2
        if filesystem.get_file_info(log_entry(middle)).type == pa_fs.FileType.NotFound:
            low = middle + 1
        else:
            high = middle
    return low


def stamped_at_or_before(
    filesystem: pa_fs.FileSystem, oldest: int, latest: int, limit_ms: float
) -> int | None:
    """The last version from `oldest` to `latest` whose commit is stamped at or before
    `limit_ms` by its own timestamp, found by a binary search (the stamps in version order, as
    one writer's clock makes them); None when the oldest is stamped later, or when a commit
    read has no stamp or is gone (the caller then reads the whole log)."""
    if (first := commit_info(filesystem, oldest)) is None or "timestamp" not in first:
        return None
    if float(first["timestamp"]) > limit_ms:
        return None
    low, high = oldest, latest
    while low < high:
        middle = (low + high + 1) // 2
        info = commit_info(filesystem, middle)
        if info is None or "timestamp" not in info:
            return None
        if float(info["timestamp"]) <= limit_ms:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class LogFiles:
    """What a table's `_delta_log` holds: what every open lists (on a local disk, or a store
    that cannot list from an offset) and what the log takes on disk."""

    commits: int = 0
    checkpoints: int = 0  # checkpoint files (a multi-part checkpoint counts each part)
    bytes: int = 0  # of every file in the log


def log_files(filesystem: pa_fs.FileSystem) -> LogFiles:
    """The log of the table rooted at `filesystem`, from one listing, none of it read."""
    selector = pa_fs.FileSelector("_delta_log", allow_not_found=True)
    commits = checkpoints = size = 0
    for info in filesystem.get_file_info(selector):
        commits += bool(COMMIT_FILE.match(info.base_name))
        checkpoints += ".checkpoint." in info.base_name
        size += info.size or 0
    return LogFiles(commits, checkpoints, size)


def count_commits(filesystem: pa_fs.FileSystem) -> int:
    """How many commits the log holds: one listing, none of them read."""
    return log_files(filesystem).commits
