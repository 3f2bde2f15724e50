"""What both transports record about each Export they answer (otel_delta.metrics)."""

from __future__ import annotations

import time

from otel_delta.errors import UnauthenticatedError
from otel_delta.metrics import EXPORT_SECONDS, REQUESTS
from otel_delta.pipeline import Accepted, Outcome, Retryable
from otel_delta.signals import Signal


def outcome_label(outcome: Outcome) -> str:
    if isinstance(outcome, Accepted):
        return "partial" if outcome.partial else "accepted"
    if isinstance(outcome, Retryable):
        return "retryable"
    return "unauthenticated" if isinstance(outcome.error, UnauthenticatedError) else "rejected"


def observe(transport: str, signal: Signal, outcome: Outcome, started: float) -> None:
    """Count the request by outcome and time it from `started` (time.monotonic())."""
    REQUESTS.labels(transport, signal.name, outcome_label(outcome)).inc()
    EXPORT_SECONDS.labels(transport, signal.name).observe(time.monotonic() - started)
