"""Quoting for DataFusion and Spark SQL (`otel_delta/sql.py`): what users give as values and
column names never ends a literal or an identifier early, in either dialect."""

from __future__ import annotations

import pytest

from otel_delta.sql import quote_identifier, quote_string


@pytest.mark.parametrize(
    ("value", "datafusion", "spark"),
    [
        ("plain", "'plain'", "'plain'"),
        ("it's", "'it''s'", "'it\\'s'"),
        ("back\\slash", "'back\\slash'", "'back\\\\slash'"),
        ("'; DROP TABLE spans; --", "'''; DROP TABLE spans; --'", "'\\'; DROP TABLE spans; --'"),
    ],
)
def test_string_literals(value: str, datafusion: str, spark: str) -> None:
    assert quote_string(value, "datafusion") == datafusion
    assert quote_string(value, "spark") == spark


@pytest.mark.parametrize(
    ("name", "datafusion", "spark"),
    [
        ("service_name", '"service_name"', "`service_name`"),
        ('we"ird', '"we""ird"', '`we"ird`'),
        ("back`tick", '"back`tick"', "`back``tick`"),
    ],
)
def test_identifiers(name: str, datafusion: str, spark: str) -> None:
    assert quote_identifier(name, "datafusion") == datafusion
    assert quote_identifier(name, "spark") == spark
