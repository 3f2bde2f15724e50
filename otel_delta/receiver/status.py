"""gRPC error details per the OTLP spec: UNAVAILABLE carries a google.rpc.RetryInfo."""

from __future__ import annotations

import grpc
from google.protobuf.any_pb2 import Any
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo


def retry_metadata(message: str, retry_after_seconds: float) -> tuple[tuple[str, bytes], ...]:
    """Trailers that tell an exporter how long to back off.

    Both the standard rich-status trailer (read by the Collector's Go exporters) and the bare
    `google.rpc.retryinfo-bin` trailer (read by the Python SDK exporter) are sent.
    """
    seconds = int(retry_after_seconds)
    info = RetryInfo(
        retry_delay=Duration(seconds=seconds, nanos=int((retry_after_seconds - seconds) * 1e9))
    )
    detail = Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=grpc.StatusCode.UNAVAILABLE.value[0], message=message, details=[detail]
    )
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", info.SerializeToString()),
    )
