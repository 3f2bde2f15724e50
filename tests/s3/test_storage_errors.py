"""On S3, what cannot work is refused at start with one line (a missing bucket, wrong keys);
and `otel-delta backfill` with the default engine (Spark, through S3A) loads an S3 lakehouse."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests import corpus
from tests.helpers import LOOPBACK
from tests.s3 import S3Server
from tests.transports.test_http import otlp_json

pytestmark = pytest.mark.e2e


def serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def config_for(tmp_path: Path, s3: S3Server, table_path: str, options: dict[str, str]) -> Path:
    lines = "\n".join(f'{key} = "{value}"' for key, value in options.items())
    config = tmp_path / "deltalake.toml"
    config.write_text(
        f'{LOOPBACK}[deltalake]\ntable_path = "{table_path}"\n'
        f"[deltalake.storage.options]\n{lines}\n"
        f'[wal]\ndir = "{tmp_path / "wal"}"\n'
    )
    return config


@pytest.mark.parametrize("problem", ["missing bucket", "wrong secret key"])
def test_serve_refuses_an_unusable_s3_lakehouse_with_one_line(tmp_path, s3, problem) -> None:
    options = s3.storage_options()
    table_path = s3.url("lake")
    if problem == "missing bucket":
        table_path = "s3://no-such-bucket-here/lake"
    else:
        options["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    done = serve(config_for(tmp_path, s3, table_path, options))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-delta: "), done.stderr
    assert "deltalake.table_path" in lines[0] and table_path in lines[0]
    assert "Traceback" not in done.stderr and "\x1b[" not in done.stderr


def test_backfill_with_the_default_engine_loads_an_s3_lakehouse(tmp_path, s3) -> None:
    exported = tmp_path / "traces.json"
    exported.write_bytes(otlp_json(corpus.trace_request()) + b"\n")
    config = config_for(tmp_path, s3, s3.url("lake"), s3.storage_options())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_delta.cli",
            "backfill",
            str(exported),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    spans = DeltaTable(s3.url("lake", "spans"), storage_options=s3.storage_options())
    assert spans.to_pyarrow_table().num_rows == 4
    operations = [entry.get("engineInfo", "") for entry in spans.history()]
    assert any("Spark" in info or "Apache-Spark" in info for info in operations), operations


@pytest.mark.parametrize("problem", ["missing bucket", "wrong secret key", "server down"])
def test_backfill_into_an_unusable_s3_lakehouse_is_one_line_naming_it(tmp_path, s3, problem):
    """As `serve` says it: before, delta-rs's OSError reached the CLI's catch-all, which kept
    its first line only ("backfill failed: OSError: Kernel error -> Generic S3 error")."""
    exported = tmp_path / "traces.json"
    exported.write_bytes(otlp_json(corpus.trace_request()) + b"\n")
    options = s3.storage_options()
    table_path = s3.url("lake")
    if problem == "missing bucket":
        table_path = "s3://no-such-bucket-here/lake"
    elif problem == "wrong secret key":
        options["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    config = config_for(tmp_path, s3, table_path, options)
    config.write_text(config.read_text() + '[deltalake.operations]\nengine = "delta-rs"\n')
    argv = [sys.executable, "-m", "otel_delta.cli", "backfill", str(exported), "--config"]
    with s3.down() if problem == "server down" else nullcontext():
        done = subprocess.run([*argv, str(config)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-delta: "), done.stderr
    assert f"deltalake.table_path: cannot use {table_path}: " in lines[0]
    cause = {
        "missing bucket": "NoSuchBucket",
        "wrong secret key": "403 Forbidden",
        "server down": "Connection refused",
    }[problem]
    assert cause in lines[0], lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["serve", "tables"])
def test_no_credentials_anywhere_is_our_one_line_only(tmp_path, s3, command) -> None:
    """No storage options, nothing in the environment or a profile (the lake on AWS, its keys
    forgotten): delta-rs asks the AWS SDK's credential chain, which used to write five WARN
    lines of its own (`[… WARN  aws_config::imds::region] …`) on stderr before ours
    (otel_delta/rustenv.py)."""
    config = config_for(tmp_path, s3, s3.url("lake"), {})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RUST_LOG"}
    env["HOME"] = str(tmp_path)  # no ~/.aws profile
    done = subprocess.run(
        [sys.executable, "-m", "otel_delta.cli", command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode in (1, 2), done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-delta: "), done.stderr
    assert s3.url("lake") in lines[0], lines[0]  # the cause varies: IMDS refused, or absent
