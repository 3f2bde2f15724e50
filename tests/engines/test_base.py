"""What the engines share: telling rows a table refuses from a failing store."""

from __future__ import annotations

from otel_delta.engines.base import rows_rejected
from otel_delta.errors import RowsRejectedError


def test_rows_rejected_tells_the_rows_from_the_storage() -> None:
    refused = Exception("Generic DeltaTable error: Invalid data found: 1 rows failed validation")
    assert rows_rejected(refused)
    assert rows_rejected(RowsRejectedError("x"))
    assert rows_rejected(Exception("org.apache.spark.sql.delta.DeltaInvariantViolationException"))
    assert not rows_rejected(OSError("No space left on device"))
    assert not rows_rejected(Exception("Generic S3 error: connection reset"))
