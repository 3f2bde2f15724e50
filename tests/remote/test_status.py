"""Every typed error maps to the gRPC code its callers should react to."""

from __future__ import annotations

import grpc

from otel_delta.errors import (
    CommitError,
    ConcurrentModificationError,
    InvalidPredicateError,
    InvalidQueryError,
    PartitionNotFoundError,
    SchemaMismatchError,
    TableNotFoundError,
)
from otel_delta.remote.service import status_of


def test_status_codes() -> None:
    assert status_of(TableNotFoundError("x")) == grpc.StatusCode.NOT_FOUND
    assert status_of(PartitionNotFoundError("spans", "date=1")) == grpc.StatusCode.NOT_FOUND
    assert status_of(InvalidPredicateError("bad", "x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(InvalidQueryError("bad", "x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(ConcurrentModificationError("spans", 3, 5)) == grpc.StatusCode.ABORTED
    assert status_of(SchemaMismatchError("m", "a", "b")) == grpc.StatusCode.FAILED_PRECONDITION
    assert status_of(CommitError("c")) == grpc.StatusCode.FAILED_PRECONDITION
