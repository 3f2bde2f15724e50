"""A backfill on a real Spark standalone cluster (master + one worker on 127.0.0.1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.signals import SIGNALS_BY_NAME
from otel_delta.spark.standalone import spark_env, standalone_cluster
from tests import corpus
from tests.backfill.collector import write_json_lines, write_proto

pytestmark = pytest.mark.e2e


def test_backfill_on_a_standalone_cluster(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_json_lines(inputs / "traces.json", [corpus.trace_request()] * 3)
    write_proto(inputs / "logs.pb", [corpus.logs_request()] * 2, "gzip")
    lake = tmp_path / "lake"
    with standalone_cluster(tmp_path) as cluster:
        config = tmp_path / "deltalake.toml"
        config.write_text(
            f'[deltalake]\ntable_path = "{lake}"\n'
            f'[deltalake.operations]\nengine = "spark"\n'
            f'[spark]\nmaster = "{cluster.url}"\napp_name = "otel-delta-cluster-test"\n'
            f'[spark.conf]\n"spark.executor.memory" = "512m"\n"spark.cores.max" = "1"\n'
        )
        command = [sys.executable, "-m", "otel_delta.cli", "backfill", "--config", str(config)]
        done = subprocess.run(
            [*command, str(inputs)], env=spark_env(), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # the job ran as an application of this cluster (so on its worker's executor)
        assert "otel-delta-cluster-test" in cluster.application_names()

    spans = SIGNALS_BY_NAME["traces"].convert(corpus.trace_request()).tables["spans"]
    logs = SIGNALS_BY_NAME["logs"].convert(corpus.logs_request()).tables["logs"]
    assert DeltaTable(str(lake / "spans")).to_pyarrow_table().num_rows == 3 * spans.num_rows
    assert DeltaTable(str(lake / "logs")).to_pyarrow_table().num_rows == 2 * logs.num_rows
    printed = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[:-1]}
    assert printed == {"logs": f"{2 * logs.num_rows:,}", "spans": f"{3 * spans.num_rows:,}"}
    assert "2 file(s) loaded with spark" in done.stdout
    assert "2/2 files" in done.stderr  # the progress line goes to stderr
