"""The interface between the buffer and a Delta engine."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa


class TableWriter(Protocol):
    def append(self, table_name: str, data: pa.Table) -> int:
        """Commit `data` to the table as one Delta transaction; return the committed version.

        Must be safe to call from several threads for *different* tables at once.
        Raises CommitError if the commit did not happen.
        """
        ...
