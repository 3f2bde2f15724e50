"""The merge key of an upsert (otel_delta/connector/upsert.py)."""

from __future__ import annotations

import pytest

from otel_delta.connector.upsert import merge_keys
from otel_delta.tables import TABLES

PARTITIONS = ("service_name", "date")


def test_the_partitions_join_the_default_key_only() -> None:
    """The default key prunes the merge to the records' partitions; a key the caller names is
    used as named, however it is spelled: a tuple equal to the default used to get the
    partitions too, a list or "a, b" not, so a span moved across midnight was inserted again
    or updated depending on the spelling."""
    schema = TABLES["spans"].schema
    assert merge_keys("spans", schema, None, PARTITIONS) == [*PARTITIONS, "trace_id", "span_id"]
    for spelled in (("trace_id", "span_id"), ["trace_id", "span_id"], "trace_id, span_id"):
        assert merge_keys("spans", schema, spelled, PARTITIONS) == ["trace_id", "span_id"]


@pytest.mark.parametrize("key", [["trace_id", "trace_id"], "trace_id,trace_id"])
def test_a_key_named_twice_counts_once(key) -> None:
    assert merge_keys("spans", TABLES["spans"].schema, key, PARTITIONS) == ["trace_id"]
