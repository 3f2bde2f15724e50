from pathlib import Path

import pytest

from otel_delta.spark.session import SparkSetupError, delta_jars


def test_missing_jars_name_the_command_that_fetches_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_DELTA_JARS", str(tmp_path))
    with pytest.raises(SparkSetupError) as err:
        delta_jars()
    message = str(err.value)
    assert "delta-spark_2.13-4.0.1.jar" in message and "make jars" in message
    assert "\n" not in message
