"""The Collector configurations we ship pass the `validate` command of the Collector we build
(tools/otelcol/builder.yaml: the components they use, at the pinned version)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.tools import otelcol_binary

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "collector").glob("*.yaml"))


def test_there_are_configs_for_grpc_and_http() -> None:
    names = {path.name for path in CONFIGS}
    assert {"otlp-grpc.yaml", "otlp-http.yaml"} <= names


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """The built Collector's `validate` (the configs read the token from the environment)."""
    return subprocess.run(
        [str(otelcol_binary()), "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OTEL_DELTA_TOKEN": "example-token"},
    )


# they run the Collector that `make collector` builds: not part of the quick set (`make quick`)
@pytest.mark.e2e
@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_collector_validates(config: Path) -> None:
    result = validate(config)
    assert result.returncode == 0, result.stderr


@pytest.mark.e2e
def test_validate_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    text = (CONFIGS[0]).read_text().replace("send_batch_size", "send_batch_sizes", 1)
    assert text != CONFIGS[0].read_text()
    broken.write_text(text)
    assert validate(broken).returncode != 0
