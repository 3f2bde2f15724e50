"""An append's commit on a local file system, published by us in constant time.

delta-rs lists the whole `_delta_log` during a commit and again when its handle follows the
commit, and on a local file system a listing reads the whole directory whatever offset it
starts from (delta-io/delta-kernel-rs#2335): about 2.6 µs per log entry per commit, so at the
ingest defaults (8,640 commits a day per table, kept for 30 days) an append got slower all day
(bench/long_run.py: 50 → 77 ms from the first to the last 10% of a day's commits).

A blind append needs none of it. It reads nothing of the table, so the only commit it can
conflict with is another one of the same version, and publishing the commit with a hard link
settles that: the kernel refuses to link over an existing name, so exactly one writer gets
each version (as delta-rs's own local commit and our Spark log store do). The loser learns it
at once and hands its files to delta-rs, which reads what was committed meanwhile, checks it
for conflicts (a schema change fails the commit, which the engine retries on the new schema)
and commits at a later version.

Only where the table asks nothing else of a writer: a local table, writer version 2 at most
(no table features, no in-commit timestamps), no invariants in the schema; files written by
engines/data_files (no CHECK constraint, no column mapping). The entry holds what delta-rs
writes for the same append: commitInfo (with our custom keys), one `add` per file, the `txn`
of the write-ahead log.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from deltalake import DeltaTable, Transaction

from otel_delta.engines.data_files import DataFile

# what delta-rs leaves as it is in an action's path (its percent-encoding of the file's
# relative path; tests/engines/test_local_commit.py checks it against delta-rs's output for
# every printable ASCII character and some others)
_KEPT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$&'()+,-./:;=@_~")


def _client() -> str:
    try:
        return f"otel-delta-{version('otel-delta')}"
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without metadata
        return "otel-delta"


CLIENT = _client()


def encode_path(path: str) -> str:
    """A data file's relative path as the log holds it: percent-encoded as delta-rs encodes
    it. Readers decode it; a remove action must carry the same text as the add it removes."""
    return "".join(
        c if c in _KEPT else "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in path
    )


def blind_appendable(table: DeltaTable) -> bool:
    """Does the table's protocol let a writer append by adding files and nothing else?"""
    protocol = table.protocol()
    if protocol.min_writer_version > 2 or protocol.writer_features:
        return False
    return "delta.invariants" not in table.schema().to_json()


def entry(
    files: Sequence[DataFile],
    partition_by: Sequence[str],
    custom: dict[str, str],
    app_transaction: Transaction | None,
    now_ms: int,
) -> bytes:
    """The log entry of an append of `files`: newline-delimited JSON actions."""
    info = {
        "timestamp": now_ms,
        "operation": "WRITE",
        "operationParameters": {
            "mode": "Append",
            "partitionBy": json.dumps(list(partition_by), separators=(",", ":")),
        },
        "isBlindAppend": True,
        "engineInfo": CLIENT,
        "clientVersion": CLIENT,
        **custom,
    }
    actions: list[dict] = [{"commitInfo": info}]
    actions += [
        {
            "add": {
                "path": encode_path(f.path),
                "partitionValues": f.partition_values,
                "size": f.size,
                "modificationTime": now_ms,
                "dataChange": True,
                "stats": f.stats,
            }
        }
        for f in files
    ]
    if app_transaction is not None:
        txn = {
            "appId": app_transaction.app_id,
            "version": app_transaction.version,
            "lastUpdated": now_ms,
        }
        actions.append({"txn": txn})
    return b"".join(json.dumps(a, separators=(",", ":")).encode() + b"\n" for a in actions)


# what os.link raises where the file system has no hard links (some network and FUSE mounts)
NO_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV})


def publish(log_dir: Path, version: int, body: bytes) -> bool:
    """Publish `body` as the commit of `version`: True when it is ours, False when another
    writer has that version already. The entry is written whole to a temporary name first, so
    a reader never sees part of it, then linked to its name, which fails if the name exists.
    Any other failure raises OSError (`NO_LINKS`: this file system cannot do it at all)."""
    target = log_dir / f"{version:020d}.json"
    temporary = log_dir / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temporary, "xb") as out:
            out.write(body)
        os.link(temporary, target)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return True
