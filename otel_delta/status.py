"""Our errors as transport status codes: the one table both gRPC and HTTP answers come from.

Every failure a caller can see is one of our error types (otel_delta.errors); this module maps
each to a gRPC status code and an HTTP status, following the OTLP specification for the
receiver (UNAVAILABLE / 503 are retryable and carry a retry delay; INVALID_ARGUMENT / 400 are
not) and google.rpc's code ↔ HTTP mapping for the rest. Anything else is INTERNAL / 500.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf.any_pb2 import Any
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo

from otel_delta.errors import (
    BufferFullError,
    ClientDisconnectedError,
    CommitError,
    ConcurrentModificationError,
    ConfigError,
    ConvertWorkerLostError,
    InvalidPredicateError,
    InvalidRequestError,
    LeaseHeldError,
    MissingDependencyError,
    OperationDisabledError,
    OtelDeltaError,
    PartitionNotFoundError,
    RequestTimeoutError,
    RequestTooLargeError,
    RowsRejectedError,
    SchemaMismatchError,
    ServerBusyError,
    ShuttingDownError,
    StoreUnavailableError,
    StreamFailedError,
    TableNotFoundError,
    UnauthenticatedError,
    UnsupportedMediaTypeError,
    VersionNotFoundError,
    WalError,
)


@dataclass(frozen=True)
class Status:
    grpc: grpc.StatusCode
    http: int
    retryable: bool = False


# first match wins: subclasses before their bases
STATUS_OF: tuple[tuple[type[OtelDeltaError], Status], ...] = (
    # the OTLP receiver
    (UnsupportedMediaTypeError, Status(grpc.StatusCode.INVALID_ARGUMENT, 415)),
    (UnauthenticatedError, Status(grpc.StatusCode.UNAUTHENTICATED, 401)),
    # 504, google.rpc's HTTP code of DEADLINE_EXCEEDED, which OTLP/HTTP clients retry as gRPC
    # clients retry the code (408 is final under OTLP/HTTP: the Collector dropped the batch)
    (RequestTimeoutError, Status(grpc.StatusCode.DEADLINE_EXCEEDED, 504)),
    (ClientDisconnectedError, Status(grpc.StatusCode.CANCELLED, 499)),
    (InvalidRequestError, Status(grpc.StatusCode.INVALID_ARGUMENT, 400)),
    (RowsRejectedError, Status(grpc.StatusCode.INVALID_ARGUMENT, 400)),
    (RequestTooLargeError, Status(grpc.StatusCode.RESOURCE_EXHAUSTED, 413)),
    (ServerBusyError, Status(grpc.StatusCode.RESOURCE_EXHAUSTED, 429)),
    (BufferFullError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    (ShuttingDownError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    (CommitError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    (WalError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    (ConvertWorkerLostError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    # the connector's operations
    (StoreUnavailableError, Status(grpc.StatusCode.UNAVAILABLE, 503, retryable=True)),
    (TableNotFoundError, Status(grpc.StatusCode.NOT_FOUND, 404)),
    (PartitionNotFoundError, Status(grpc.StatusCode.NOT_FOUND, 404)),
    (VersionNotFoundError, Status(grpc.StatusCode.NOT_FOUND, 404)),
    (InvalidPredicateError, Status(grpc.StatusCode.INVALID_ARGUMENT, 400)),
    # the server's own settings do not allow the call (e.g. no [privacy] hash key): not the
    # caller's argument, and not retryable until an operator changes them
    (ConfigError, Status(grpc.StatusCode.FAILED_PRECONDITION, 400)),
    (SchemaMismatchError, Status(grpc.StatusCode.FAILED_PRECONDITION, 400)),
    (ConcurrentModificationError, Status(grpc.StatusCode.ABORTED, 409)),
    # another process's maintenance lease (engines/lease.py): a conflict, over when it ends
    (LeaseHeldError, Status(grpc.StatusCode.ABORTED, 409)),
    (OperationDisabledError, Status(grpc.StatusCode.PERMISSION_DENIED, 403)),
    (MissingDependencyError, Status(grpc.StatusCode.UNIMPLEMENTED, 501)),
    # the Kafka stream job (its CLI exit code comes from here too)
    (StreamFailedError, Status(grpc.StatusCode.INTERNAL, 500)),
    (OtelDeltaError, Status(grpc.StatusCode.FAILED_PRECONDITION, 400)),
)
INTERNAL = Status(grpc.StatusCode.INTERNAL, 500)


def status_for(error: BaseException) -> Status:
    """The status of any exception: ours by type, anything else INTERNAL."""
    if isinstance(error, OtelDeltaError):
        return next(status for kind, status in STATUS_OF if isinstance(error, kind))
    return INTERNAL


def status_of(error: OtelDeltaError) -> grpc.StatusCode:
    """The gRPC status code of one of our errors."""
    return status_for(error).grpc


def retry_info(retry_after_seconds: float) -> RetryInfo:
    seconds = int(retry_after_seconds)
    return RetryInfo(
        retry_delay=Duration(seconds=seconds, nanos=int((retry_after_seconds - seconds) * 1e9))
    )


def rpc_status(
    code: grpc.StatusCode, message: str, retry_after_seconds: float | None = None
) -> status_pb2.Status:
    """The google.rpc.Status of an answer: the gRPC rich status, and the OTLP/HTTP error body."""
    status = status_pb2.Status(code=code.value[0], message=message)
    if retry_after_seconds is not None:
        detail = Any()
        detail.Pack(retry_info(retry_after_seconds))
        status.details.append(detail)
    return status


def retry_metadata(message: str, retry_after_seconds: float) -> tuple[tuple[str, bytes], ...]:
    """gRPC trailers that tell an exporter how long to back off, per the OTLP spec.

    Both the standard rich-status trailer (read by the Collector's Go exporters) and the bare
    `google.rpc.retryinfo-bin` trailer (read by the Python SDK exporter) are sent.
    """
    status = rpc_status(grpc.StatusCode.UNAVAILABLE, message, retry_after_seconds)
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry_info(retry_after_seconds).SerializeToString()),
    )
