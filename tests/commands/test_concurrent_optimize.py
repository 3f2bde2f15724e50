"""Two `otel-delta optimize` processes on one table at once: its rows stay stored once.

delta-rs 1.6.6 lets both rewrites land (delta-io/delta-rs#3982): before the maintenance lease
(engines/lease.py) every row of the table was stored twice. Now one process rewrites, the other
is told, in one line, that another process maintains the table. Each process pauses once it
holds the lease, before it plans (otel_delta/faults.py), so the two overlap however slowly
either starts.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.maintenance.tasks import utc_today
from tests.maintenance.test_maintainer import commit_each, spans_table

pytestmark = pytest.mark.e2e

FILES = 60  # one row each
PAUSE_SECONDS = 6  # longer than one process may start after the other on a busy machine


def test_two_optimize_processes_at_once_store_every_row_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    table = spans_table(lake)
    commit_each(table, utc_today() - dt.timedelta(days=1), range(FILES))
    config = tmp_path / "deltalake.toml"
    config.write_text(f'[deltalake]\ntable_path = "{lake}"\n')
    argv = [sys.executable, "-m", "otel_delta.cli", "optimize", "spans", "--config", str(config)]

    env = {**os.environ, "OTEL_DELTA_PAUSE_AT": f"optimize-leased:{PAUSE_SECONDS}"}
    runs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outcomes = [(run.wait(timeout=120), *run.communicate()) for run in runs]

    ids = DeltaTable(table.uri).to_pyarrow_table().column("span_id").to_pylist()
    assert sorted(ids) == [f"{i:016x}" for i in range(FILES)], f"{len(ids)} rows: {outcomes}"
    assert sorted(code for code, _, _ in outcomes) == [0, 1], outcomes
    refused = next(err for code, _, err in outcomes if code == 1)
    assert len(refused.strip().splitlines()) == 1, refused  # one line, no traceback
    assert "being maintained by another process" in refused, refused
    assert DeltaTable(table.uri).transaction_version("otel-delta.maintenance-lease") is not None
