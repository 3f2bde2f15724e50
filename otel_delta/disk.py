"""The one way our code makes a file's data, or a directory's entries, durable: the write-ahead
log (its segments, its directory) and the engines (a local table's commit: engines/durable.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a directory's entries (a file created, renamed or deleted in
    it), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
