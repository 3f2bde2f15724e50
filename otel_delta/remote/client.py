"""A small client of the ConnectorService: stubs with the bearer token, Query as an Arrow table."""

from __future__ import annotations

from typing import Any

import grpc
import pyarrow as pa

from otel_delta.remote.protocol import generated, read_ipc


class ConnectorClient:
    def __init__(self, endpoint: str, token: str | None) -> None:
        self.pb, pb_grpc = generated()
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = pb_grpc.ConnectorServiceStub(self.channel)
        self.metadata = [("authorization", f"Bearer {token}")] if token is not None else []

    def call(self, rpc: str, request: Any, timeout: float = 60) -> Any:
        return getattr(self.stub, rpc)(request, metadata=self.metadata, timeout=timeout)

    def query(self, table: str, timeout: float = 300, **fields: Any) -> pa.Table:
        chunks = self.stub.Query(
            self.pb.QueryRequest(table=table, **fields), metadata=self.metadata, timeout=timeout
        )
        return read_ipc(chunk.data for chunk in chunks)

    def close(self) -> None:
        self.channel.close()
