"""Keep pandas out of the serving bridge: pyarrow imports it to convert Python values.

The first time pyarrow turns Python objects into Arrow (`pa.array([...])`, `pa.scalar(...)`),
it imports pandas, if installed, to recognise pandas' own values (`pd.NA`, `Timestamp`); it
is installed here for PySpark and the connector's `to_pandas`. The bridge never hands pyarrow
a pandas value, and the import alone cost 47 MiB of resident memory (measured: a serving
bridge idled at 184 MiB with it and 140-146 MiB without). pyarrow looks for pandas once per
process, so failing that one lookup keeps it out for good, while an explicit import (PySpark,
`Table.to_pandas`) still works. `import pyarrow.dataset` and `pq.read_table` (which uses it)
import pandas too, so the bridge's modules import pyarrow.dataset only where a connector
query needs it, and compaction reads files with `pq.ParquetFile`.
"""

from __future__ import annotations

import datetime as dt
import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pyarrow as pa


class _HidePandas(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def keep_pandas_unloaded() -> None:
    """Let pyarrow's one pandas lookup fail (a no-op once pandas is loaded)."""
    if "pandas" in sys.modules:
        return
    finder = _HidePandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # the Python-to-Arrow conversion's lookup
        pa.scalar(dt.date(1970, 1, 1), pa.date32())
    finally:
        sys.meta_path.remove(finder)
