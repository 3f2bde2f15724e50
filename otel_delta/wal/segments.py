"""The WAL's files: numbered segments in one directory, the instance id, and the lock.

A segment is named by the position of its first record (`00000000000000000042.wal`); records
are only ever appended to the newest one, which is never deleted, so its name keeps the next
position known even when every older segment has been released.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from otel_delta.disk import fsync_path
from otel_delta.errors import ConfigError

SUFFIX = ".wal"
INSTANCE_FILE = "instance-id"
LOCK_FILE = "lock"
# The log holds requests as received, raw telemetry (which may carry personal data, or a
# credential an application put in an attribute): only the bridge's user may read it, whatever
# the umask or the mode of a mounted volume
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def private(path: str | os.PathLike[str], flags: int) -> int:
    """An `opener` for open(): a file created readable and writable by its owner only."""
    return os.open(path, flags, FILE_MODE)


@dataclass
class Segment:
    first_position: int
    path: Path
    size: int
    # the offsets of the records this process wrote to the segment, whose positions run on
    # from `indexed_from` one by one: how `WriteAheadLog.read` finds a record without scanning
    # the segment (8 bytes a record: a dict took some 100, megabytes for small requests)
    indexed_from: int = 0
    offsets: array = field(default_factory=lambda: array("Q"))

    def offset_of(self, position: int) -> int | None:
        index = position - self.indexed_from
        return self.offsets[index] if self.offsets and 0 <= index < len(self.offsets) else None

    def indexed(self, position: int, offset: int) -> None:
        """Record that the record at `position` starts at `offset`."""
        if not self.offsets:
            self.indexed_from = position
        if position == self.indexed_from + len(self.offsets):
            self.offsets.append(offset)


def segment_path(directory: Path, first_position: int) -> Path:
    return directory / f"{first_position:020d}{SUFFIX}"


def list_segments(directory: Path) -> list[Segment]:
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        stem = path.name.removesuffix(SUFFIX)
        if stem.isdigit():
            found.append(Segment(int(stem), path, path.stat().st_size))
    return sorted(found, key=lambda s: s.first_position)


def instance_id(directory: Path) -> str:
    """This WAL's id, created once: it names the Delta transactions of this bridge."""
    path = directory / INSTANCE_FILE
    if path.is_file():
        value = path.read_text().strip()
        if value:
            return value
    value = uuid.uuid4().hex
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", opener=private) as out:
        out.write(value + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_path(directory)
    return value


def lock(directory: Path) -> int:
    """An exclusive lock on the directory for this process's lifetime (one bridge per WAL)."""
    fd = private(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"wal.dir: {directory} is in use by another otel-delta process "
            "(each bridge needs its own WAL directory)"
        ) from None
    return fd


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
