"""The signal registry: every table belongs to exactly one signal, and what a signal says of its
tables is true of their schemas."""

from __future__ import annotations

import pyarrow as pa

from otel_delta.signals import SIGNALS, signal_of_request, signal_of_table
from otel_delta.tables import TABLES


def test_every_table_has_exactly_one_signal() -> None:
    owners = [name for signal in SIGNALS for name in signal.tables]
    assert sorted(owners) == sorted(TABLES)
    for name in TABLES:
        assert name in signal_of_table(name).tables


def test_time_columns_and_partial_success_field_exist() -> None:
    for signal in SIGNALS:
        for name in signal.tables:
            schema = TABLES[name].schema
            for column in signal.time_columns:
                assert pa.types.is_integer(schema.field(column).type), (signal.name, column)
            timestamp = schema.field(signal.timestamp_column).type
            assert pa.types.is_timestamp(timestamp), (signal.name, name)
        response = signal.response_for(2, "2 item(s) rejected: bad id")
        partial = response.partial_success  # type: ignore[attr-defined]
        assert getattr(partial, signal.rejected_field) == 2
        assert signal.response_for(0, "").ByteSize() == 0  # no partial_success when all kept
        assert signal_of_request(signal.request()) is signal
    assert signal_of_request(SIGNALS[0].response()) is None
