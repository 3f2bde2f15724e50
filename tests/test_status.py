"""Every typed error maps to the gRPC code and HTTP status its callers should react to — one
table for the OTLP receiver and the ConnectorService alike."""

from __future__ import annotations

import grpc
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo

from otel_delta.errors import (
    BufferFullError,
    CommitError,
    ConcurrentModificationError,
    InvalidPredicateError,
    InvalidQueryError,
    InvalidRequestError,
    LeaseHeldError,
    PartitionNotFoundError,
    RequestTooLargeError,
    SchemaMismatchError,
    ShuttingDownError,
    StoreUnavailableError,
    TableNotFoundError,
)
from otel_delta.status import retry_metadata, status_for, status_of


def test_status_codes() -> None:
    assert status_of(TableNotFoundError("x")) == grpc.StatusCode.NOT_FOUND
    assert status_of(PartitionNotFoundError("spans", "date=1")) == grpc.StatusCode.NOT_FOUND
    assert status_of(InvalidPredicateError("bad", "x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(InvalidQueryError("bad", "x")) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(ConcurrentModificationError("spans", 3, 5)) == grpc.StatusCode.ABORTED
    assert status_of(LeaseHeldError("spans", 0)) == grpc.StatusCode.ABORTED
    assert status_of(SchemaMismatchError("m", "a", "b")) == grpc.StatusCode.FAILED_PRECONDITION
    # a failed commit stored nothing and may succeed later: retryable, as the receiver answers
    assert status_of(CommitError("c")) == grpc.StatusCode.UNAVAILABLE
    # a store that is down or refuses the keys: nothing done, worth retrying once it is back
    unavailable = StoreUnavailableError("spans", "s3://b/spans", "Connection refused")
    assert status_of(unavailable) == grpc.StatusCode.UNAVAILABLE


def test_receiver_statuses_follow_the_otlp_spec_for_grpc_and_http() -> None:
    cases = {
        InvalidRequestError("x"): (grpc.StatusCode.INVALID_ARGUMENT, 400, False),
        RequestTooLargeError("x"): (grpc.StatusCode.RESOURCE_EXHAUSTED, 413, False),
        BufferFullError("x", 1.0): (grpc.StatusCode.UNAVAILABLE, 503, True),
        ShuttingDownError("x"): (grpc.StatusCode.UNAVAILABLE, 503, True),
        CommitError("x"): (grpc.StatusCode.UNAVAILABLE, 503, True),
    }
    for error, (code, http, retryable) in cases.items():
        status = status_for(error)
        assert (status.grpc, status.http, status.retryable) == (code, http, retryable), error


def test_unexpected_errors_are_internal() -> None:
    status = status_for(ValueError("boom"))
    assert (status.grpc, status.http, status.retryable) == (grpc.StatusCode.INTERNAL, 500, False)


def test_retry_metadata_carries_the_delay_both_ways() -> None:
    trailers = dict(retry_metadata("full", 2.5))
    rich = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert rich.code == grpc.StatusCode.UNAVAILABLE.value[0] and rich.message == "full"
    info = RetryInfo()
    assert rich.details[0].Unpack(info)
    assert (info.retry_delay.seconds, info.retry_delay.nanos) == (2, 500_000_000)
    bare = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert bare == info
