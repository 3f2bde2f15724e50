"""Confirmation of destructive commands: ask on a terminal, refuse elsewhere unless --yes."""

from __future__ import annotations

import sys
from typing import TextIO

from otel_delta.errors import Aborted, UsageError


def confirm(
    action: str,
    *,
    yes: bool,
    stdin: TextIO | None = None,
    stderr: TextIO | None = None,
) -> None:
    """Return if `action` may proceed; raise UsageError (no terminal) or Aborted (answered no)."""
    if yes:
        return
    stdin = stdin or sys.stdin
    stderr = stderr or sys.stderr
    if not stdin.isatty():
        raise UsageError(f"refusing to {action} without --yes (no terminal to confirm on)")
    stderr.write(f"{action}? [y/N] ")
    stderr.flush()
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise Aborted("aborted")
