"""`DeltaConfig` (otel_delta/connector/config.py): the connector's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_delta.connector import DeltaConfig
from otel_delta.errors import ConfigError


@pytest.mark.parametrize(
    ("path", "deltalake", "said"),
    [
        ("", {}, "deltalake.table_path: must not be empty"),
        ("lake", {"partition_by": ["nope"]}, "deltalake.partition_by: unknown column(s) ['nope']"),
        ("lake", {"table": {"compression": "GZIP", "compression_level": 12}}, "out of range"),
    ],
)
def test_for_path_with_bad_settings_is_a_config_error_of_ours(
    tmp_path: Path, path: str, deltalake: dict, said: str
) -> None:
    """docs/connector.md: every error is an OtelDeltaError; `for_path` raised pydantic's
    ValidationError, several lines long."""
    where = str(tmp_path / path) if path else ""
    with pytest.raises(ConfigError) as err:
        DeltaConfig.for_path(where, **deltalake)
    assert said in str(err.value) and "\n" not in str(err.value)
