"""A small progress line on stderr: files done of total, rows converted."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


class Progress:
    """Redrawn in place on a terminal; elsewhere (logs, CI) a line at most every few seconds."""

    def __init__(
        self, total_files: int, stream: TextIO | None = None, enabled: bool = True
    ) -> None:
        self.total = total_files
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last_line = 0.0
        self._shown: tuple[int, int] | None = None

    def render(self, files: int, rows: int) -> str:
        done = int(WIDTH * files / self.total) if self.total else WIDTH
        elapsed = time.monotonic() - self.started
        rate = rows / elapsed if elapsed > 0 else 0.0
        bar = "#" * done + "-" * (WIDTH - done)
        return f"backfill [{bar}] {files}/{self.total} files, {rows:,} rows ({rate:,.0f} rows/s)"

    def update(self, files: int, rows: int, final: bool = False) -> None:
        if not self.enabled or ((files, rows) == self._shown and not final):
            return
        now = time.monotonic()
        if not self.tty and not final and now - self._last_line < 5.0:
            return
        self._shown, self._last_line = (files, rows), now
        line = self.render(files, rows)
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
