"""A commit to a local table made durable before anyone relies on it.

The write-ahead log lets go of a request's record once the request's rows are committed to
Delta (buffer/group_commit: `on_committed`), and with `ack = "commit"` the client is told OK
then. On an object store a commit is durable when its PUT returns. On a local disk it is not:
the Parquet files, the log entry and the directory entries that name them sit in the page cache
until the kernel writes them back, and neither pyarrow's writer, delta-rs nor Spark's Hadoop
file system fsyncs anything. A power cut after the log's segment was deleted (and that deletion
made durable) lost rows that were in neither place, or left a log entry naming a file that was
never written (a table that fails every read).

So every append to a local table is followed by `sync_commit` before it returns: each file the
commit added, each directory on the way from them to the table's root (a partition directory
made for this commit is itself a new entry of its parent), the log entry and `_delta_log`. The
commit's own entry says which files it added, so one function covers every way a commit is
made (our own `local_commit.publish`, delta-rs's transactions and writer, Spark's).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

from otel_delta.disk import fsync_path
from otel_delta.errors import CommitError, describe


def added_files(entry: bytes, root: Path) -> list[Path]:
    """The files a commit's log entry adds, as paths under the table's `root` (absolute
    paths and file:// URIs, which shallow clones use, as they are)."""
    files = []
    for line in entry.splitlines():
        if b'"add"' not in line:
            continue
        add = json.loads(line).get("add")
        if not add:
            continue
        path = unquote(add["path"])
        parsed = urlparse(path)
        if parsed.scheme == "file":
            files.append(Path(unquote(parsed.path)))
        elif not parsed.scheme:
            files.append(root / path)
    return files


def made_durable(table_name: str, root: Path, version: int) -> None:
    """`sync_commit`, its failure a CommitError that says the commit was made: whoever
    appended must not release or answer for it, and an append with a Delta transaction is
    found committed when it is tried again (then made durable)."""
    try:
        sync_commit(root, version)
    except OSError as exc:
        raise CommitError(
            f"commit {version} to {table_name} was made, but could not be written to the disk "
            f"for good: {describe(exc)}"
        ) from exc


def sync_files(root: Path, files: list[Path], also: tuple[Path, ...] = ()) -> None:
    """fsync `files`, then the directories between them and the table's `root` (a partition
    directory made for them is a new entry of its parent) and the directories `also`."""
    directories = set(also)
    for file in files:
        fsync_path(file)
        parent = file.parent
        while parent != root and root in parent.parents:
            directories.add(parent)
            parent = parent.parent
    for directory in sorted(directories, key=lambda d: -len(d.parts)):  # deepest first
        fsync_path(directory)


def sync_commit(root: Path, version: int) -> None:
    """Make the commit of `version` to the table at `root` durable: its added files, the
    directories between them and `root`, its log entry and the log's directory, and the log
    entries before it not yet made durable here (the table's creation, a change of its
    properties: a lost entry before a kept one leaves a gap no reader gets past). The first
    time for a table in this process, from its last checkpoint (or its first commit) on."""
    log_dir = root / "_delta_log"
    entry = log_dir / f"{version:020d}.json"
    with _lock:  # a table's appends come one at a time (the engines' lock per table)
        since = _synced.get(root)
    if since is None or since > version:  # new here, or a table made again at the path
        since = _last_checkpoint(log_dir)
    earlier = [log_dir / f"{v:020d}.json" for v in range(since, version)]
    entries = [e for e in earlier if e.exists()]
    also = (log_dir, root, root.parent) if since <= 0 else (log_dir, root)
    sync_files(root, [*added_files(entry.read_bytes(), root), *entries, entry], also)
    with _lock:
        _synced[root] = version + 1


# per table root: every log entry below this version is durable (made so by this process)
_synced: dict[Path, int] = {}
_lock = threading.Lock()  # of `_synced`, which the tables' commit threads share


def _last_checkpoint(log_dir: Path) -> int:
    """The version of the table's last checkpoint (0 without one): what a reader starts from."""
    try:
        return int(json.loads((log_dir / "_last_checkpoint").read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
