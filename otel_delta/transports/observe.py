"""What both transports record about each Export they answer (otel_delta.metrics)."""

from __future__ import annotations

import re
import time

from otel_delta.errors import OtelDeltaError, UnauthenticatedError
from otel_delta.metrics import EXPORT_SECONDS, REFUSED_REQUESTS, REQUESTS
from otel_delta.pipeline import Accepted, Outcome, Retryable
from otel_delta.signals import Signal


def outcome_label(outcome: Outcome) -> str:
    if isinstance(outcome, Accepted):
        return "partial" if outcome.partial else "accepted"
    if isinstance(outcome, Retryable):
        return "retryable"
    return "unauthenticated" if isinstance(outcome.error, UnauthenticatedError) else "rejected"


def reason_label(error: BaseException) -> str:
    """`BufferFullError` → "buffer_full"; anything not ours → "internal"."""
    if not isinstance(error, OtelDeltaError):
        return "internal"
    name = type(error).__name__.removesuffix("Error")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def observe(transport: str, signal: Signal, outcome: Outcome, started: float) -> None:
    """Count the request by outcome (and a refusal by reason); time it from `started`."""
    REQUESTS.labels(transport, signal.name, outcome_label(outcome)).inc()
    if not isinstance(outcome, Accepted):
        REFUSED_REQUESTS.labels(transport, signal.name, reason_label(outcome.error)).inc()
    EXPORT_SECONDS.labels(transport, signal.name).observe(time.monotonic() - started)
