"""Two `otel-delta optimize` processes on one table at once: its rows stay stored once.

delta-rs 1.6.6 lets both rewrites land (delta-io/delta-rs#3982): before the maintenance lease
(engines/lease.py) every row of the table was stored twice. Now one process rewrites, the other
is told, in one line, that another process maintains the table.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.maintenance.tasks import utc_today
from tests.maintenance.test_maintainer import commit_each, spans_table

pytestmark = pytest.mark.e2e

FILES = 120  # one row each: enough that the two plans overlap


def test_two_optimize_processes_at_once_store_every_row_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    table = spans_table(lake)
    commit_each(table, utc_today() - dt.timedelta(days=1), range(FILES))
    config = tmp_path / "deltalake.toml"
    config.write_text(f'[deltalake]\ntable_path = "{lake}"\n')
    argv = [sys.executable, "-m", "otel_delta.cli", "optimize", "spans", "--config", str(config)]

    runs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    runs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outcomes = [(run.wait(timeout=120), *run.communicate()) for run in runs]

    ids = DeltaTable(table.uri).to_pyarrow_table().column("span_id").to_pylist()
    assert sorted(ids) == [f"{i:016x}" for i in range(FILES)], f"{len(ids)} rows: {outcomes}"
    assert any(code == 0 for code, _, _ in outcomes), outcomes
    for code, _, err in outcomes:
        if code != 0:  # the one that found the lease taken: one line, no traceback
            assert len(err.strip().splitlines()) == 1, err
            assert "being maintained by another process" in err, err
    assert DeltaTable(table.uri).transaction_version("otel-delta.maintenance-lease") is not None
