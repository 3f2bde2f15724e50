"""How our writes reach the disk for good: `fsync_path`, the one fsync of a file's data or a
directory's entries (the write-ahead log's segments and directory), and `sync_commit`, a
commit to a local Delta table made durable.

The write-ahead log lets go of a request's record once the request's rows are committed to
Delta (buffer/group_commit: `on_committed`), or stored as a dead letter, and with
`ack = "commit"` the client is told OK then. On an object store a commit is durable when its
PUT returns. On a local disk it is not: the Parquet files, the log entry and the directory
entries that name them sit in the page cache until the kernel writes them back, and neither
pyarrow's writer, delta-rs nor Spark's Hadoop file system fsyncs anything. A power cut after
the log's segment was deleted (and that deletion made durable) lost rows that were in neither
place, or left a log entry naming a file that was never written (a table that fails every
read).

So every append to a local table (the engines', the dead letters' and the other bookkeeping
tables') is followed by `sync_commit` before it returns: each file the commit added, each
directory on the way from them to the table's root (a partition directory made for this commit
is itself a new entry of its parent), the log entry and `_delta_log`, and the entries before it
not yet synced. The commit's own entry says which files it added, so one function covers every
way a commit is made (our own `local_commit.publish`, delta-rs's transactions and writer,
Spark's).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

from otel_delta.errors import CommitError, describe


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a directory's entries (a file created, renamed or deleted in
    it), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def local_path(uri: str) -> Path | None:
    """The directory of a table on a local file system (a path or a file:// URI), None for
    any other store."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parsed.path) if parsed.scheme else uri)


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


def sync_files(
    root: Path, files: list[Path], also: tuple[Path, ...] = (), *, gone_ok: bool = False
) -> None:
    """fsync `files`, then the directories between them and the table's `root` (a partition
    directory made for them is a new entry of its parent) and the directories `also`. With
    `gone_ok`, a file no longer there is skipped (a file an earlier commit added, removed and
    vacuumed since: nothing names it any more)."""
    directories = set(also)
    for file in files:
        try:
            fsync_path(file)
        except FileNotFoundError:
            if not gone_ok:
                raise
            continue
        parent = file.parent
        while parent != root and root in parent.parents:
            directories.add(parent)
            parent = parent.parent
    for directory in sorted(directories, key=lambda d: -len(d.parts)):  # deepest first
        fsync_path(directory)


def sync_commit(root: Path, version: int) -> None:
    """Make the commit of `version` to the table at `root` durable, and every commit before
    it not yet made durable here (the table's creation, a change of its properties, a delete
    or a compaction: a lost entry before a kept one leaves a gap no reader gets past, and an
    entry kept whose file is lost fails every read): their added files, the directories
    between them and `root`, their log entries, the log's directory, and the checkpoint that
    `_last_checkpoint` names with that file (an empty checkpoint it names: no open gets past
    it). The first time for a table in this process, from its last checkpoint on."""
    log_dir = root / "_delta_log"
    checkpoint, parts = _last_checkpoint(log_dir)
    with _lock:  # a table's appends come one at a time (the engines' lock per table)
        since = _synced.get(root)
    if since is None or since > version:  # new here, or a table made again at the path
        since = checkpoint
    entries = [log_dir / f"{v:020d}.json" for v in range(since, version + 1)]
    entries = [e for e in entries[:-1] if e.exists()] + entries[-1:]
    earlier = [f for e in entries[:-1] for f in added_files(e.read_bytes(), root)]
    also = (log_dir, root, root.parent) if since <= 0 else (log_dir, root)
    sync_files(root, earlier, gone_ok=True)
    sync_files(root, [*added_files(entries[-1].read_bytes(), root), *entries], also)
    if since <= checkpoint <= version:  # written since the last sync (after an append)
        sync_files(root, [*_checkpoint_files(log_dir, checkpoint, parts)], gone_ok=True)
        sync_files(root, [log_dir / "_last_checkpoint"], (log_dir,), gone_ok=True)
    with _lock:
        _synced[root] = version + 1


def _checkpoint_files(log_dir: Path, version: int, parts: int | None) -> list[Path]:
    """The files of the checkpoint of `version`: one, or `parts` of them (multi-part)."""
    if not parts:
        return [log_dir / f"{version:020d}.checkpoint.parquet"]
    return [
        log_dir / f"{version:020d}.checkpoint.{part:010d}.{parts:010d}.parquet"
        for part in range(1, parts + 1)
    ]


# per table root: every log entry below this version is durable (made so by this process)
_synced: dict[Path, int] = {}
_lock = threading.Lock()  # of `_synced`, which the tables' commit threads share


def _last_checkpoint(log_dir: Path) -> tuple[int, int | None]:
    """The version of the table's last checkpoint (0 without one: what a reader starts from)
    and its number of parts (None: one file)."""
    try:
        hint = json.loads((log_dir / "_last_checkpoint").read_text())
        return int(hint["version"]), (int(hint["parts"]) if hint.get("parts") else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0, None
