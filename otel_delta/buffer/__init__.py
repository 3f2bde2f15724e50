"""Buffering between the receiver and the writer."""

from otel_delta.buffer.group_commit import GroupCommitBuffer

__all__ = ["GroupCommitBuffer"]
