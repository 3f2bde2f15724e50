"""What the pipeline answers to one Export, before any transport turns it into a status.

Accepted (with `rejected` > 0 it is a partial success), Retryable (the client should send it
again after `retry_after` seconds) or Rejected (sending it again will not help). The transports
map the error of the last two through otel_delta.status, so gRPC and HTTP agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_delta.errors import OtelDeltaError


@dataclass(frozen=True)
class Accepted:
    rejected: int = 0  # items dropped as invalid (partial_success)
    error_message: str = ""
    rows: int = 0  # rows accepted, over all tables (spans, data points or log records)

    @property
    def partial(self) -> bool:
        return bool(self.rejected or self.error_message)


@dataclass(frozen=True)
class Retryable:
    error: OtelDeltaError
    retry_after: float

    @property
    def message(self) -> str:
        return str(self.error)


@dataclass(frozen=True)
class Rejected:
    error: BaseException  # ours, or an unexpected one (INTERNAL; its details stay in the log)
    message: str


Outcome = Accepted | Retryable | Rejected
