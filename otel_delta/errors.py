"""Our own exception hierarchy: callers catch `OtelDeltaError`, never library internals."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_CAUSE_CHARS = 600


def first_line(error: object) -> str:
    """An error's first line (its type's name if it has no text): where the rest is noise, e.g.
    the Rust backtrace delta-rs appends, or a Java stack trace through py4j."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# elements of an S3 error body that describe the request's credentials and signature
_CREDENTIALS = re.compile(
    r"<(AWSAccessKeyId|StringToSign|StringToSignBytes|CanonicalRequest|CanonicalRequestBytes|"
    r"SignatureProvided)>.*?</\1>",
    re.DOTALL,
)


def describe(error: BaseException) -> str:
    """A library error as one plain line for our messages: terminal colour codes removed (they
    reached gRPC status details), lines joined, and the causes behind a generic message (e.g.
    delta-rs's "Generic S3 error") kept instead of dropped. What an object store's error body
    says of the request's credentials (`_CREDENTIALS`: the access key id, the string it
    signed) is left out: S3 puts them in a SignatureDoesNotMatch answer, and the line goes to
    logs, to /readyz and to clients."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None and len(parts) < 4:
        text = " ".join(_CREDENTIALS.sub("", _ANSI.sub("", str(seen))).split())
        if text and text not in parts:
            parts.append(text)
        seen = seen.__cause__ or seen.__context__
    joined = ": ".join(parts) or type(error).__name__
    return joined if len(joined) <= MAX_CAUSE_CHARS else joined[: MAX_CAUSE_CHARS - 1] + "…"


class OtelDeltaError(Exception):
    """Base class of every error otel-delta raises on purpose."""


class ConfigError(OtelDeltaError):
    """The configuration file or an environment override is invalid, or the bridge cannot use
    what it names (a port, a directory, a store); the message is one line, beginning with
    "config error: " and the key, wherever it is raised."""

    PREFIX = "config error: "

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith(self.PREFIX) else self.PREFIX + message)


class InvalidRequestError(OtelDeltaError):
    """An OTLP request could not be decoded at all (maps to gRPC INVALID_ARGUMENT)."""


class UnsupportedMediaTypeError(InvalidRequestError):
    """An OTLP/HTTP request in a content type or encoding we do not read (HTTP 415)."""


class RequestTimeoutError(InvalidRequestError):
    """An OTLP/HTTP request's body, or an OTLP/gRPC Export's message, did not arrive within
    `receiver.http_body_timeout_seconds` / `grpc_message_timeout_seconds` of its turn
    (DEADLINE_EXCEEDED / 504, both retryable under OTLP): its slot goes to the requests
    waiting."""


class ClientDisconnectedError(InvalidRequestError):
    """The client closed the connection before its request's body arrived: nobody is left to
    answer, the request is only counted (CANCELLED; 499, as proxies log it)."""


class UnauthenticatedError(OtelDeltaError):
    """A request without the bearer token `receiver.auth` requires (UNAUTHENTICATED / 401)."""


class RequestTooLargeError(OtelDeltaError):
    """An OTLP request is larger than `receiver.max_receive_message_bytes` (not retryable)."""

    @classmethod
    def over_limit(
        cls, limit: int, what: str = "request", size: int | None = None
    ) -> RequestTooLargeError:
        """The one wording of a request past the limit, wherever it is found (its declared
        length, gRPC's own check, the body as read, decompressed)."""
        of = "" if size is None else f" of {size} bytes"
        return cls(
            f"{what}{of} is over the limit of {limit} bytes (receiver.max_receive_message_bytes)"
        )


class BufferFullError(OtelDeltaError):
    """The ingest buffer is at its memory limit; the client should retry later (UNAVAILABLE)."""

    def __init__(self, message: str, retry_after_seconds: float) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class MemoryLimitError(BufferFullError):
    """The bridge's resident memory is at `buffer.max_resident_bytes`; retry later
    (UNAVAILABLE)."""


class WalError(OtelDeltaError):
    """The write-ahead log cannot take a record (disk error, closing); retryable (UNAVAILABLE)."""


class WalFullError(BufferFullError):
    """The write-ahead log is at `wal.max_bytes` of records awaiting their Delta commits."""


class ShuttingDownError(OtelDeltaError):
    """The bridge is stopping and accepts no new rows (UNAVAILABLE)."""


class ConvertWorkerLostError(OtelDeltaError):
    """A convert worker process (`receiver.convert_workers`) died while this request was in
    its pool (the OOM killer, a kill -9): the pool was replaced, and the request was neither
    logged nor buffered, so sending it again stores it once (UNAVAILABLE)."""


class ServerBusyError(OtelDeltaError):
    """The server already runs as many calls of this kind as it takes (e.g. the
    ConnectorService's streaming queries, which hold a thread while their client reads); retry
    later (RESOURCE_EXHAUSTED / 429)."""


class RowsRejectedError(OtelDeltaError):
    """The table refused these rows for what they hold (a CHECK constraint, a schema or type
    violation): committing them again cannot succeed (INVALID_ARGUMENT / 400)."""


class CommitError(OtelDeltaError):
    """A Delta commit failed after retries; the rows it held were not stored (UNAVAILABLE)."""


class MalformedVarintError(OtelDeltaError):
    """Bytes that should hold a varint (protobuf's wire format, Thrift's compact protocol) end
    inside it or hold more than 64 bits (convert/wire.py); each reader turns it into its own
    answer (a request left unrepaired, a bloom filter left unread), so it never reaches a
    client."""


# --- connector API (otel_delta.connector) ---


class TableNotFoundError(OtelDeltaError):
    """The named table does not exist (or is not one of the telemetry tables)."""

    def __init__(self, name: str, uri: str | None = None) -> None:
        where = f" at {uri}" if uri else ""
        super().__init__(f"table {name!r} not found{where}")
        self.name = name
        self.uri = uri


class TableUnreadableError(OtelDeltaError):
    """A table is there but its Delta log cannot be read (damaged, or its store refuses):
    what it holds is unknown, so nothing that depends on it can go on (e.g. the write-ahead
    log's replay, which must know what each table already holds)."""

    def __init__(self, name: str, uri: str, cause: str) -> None:
        super().__init__(f"table {name!r} at {uri} cannot be read: {cause}")
        self.name = name
        self.uri = uri


class StoreUnavailableError(OtelDeltaError):
    """The table's store failed to answer (down, unreachable, refusing the keys): nothing was
    done; retrying once the store is back can succeed (UNAVAILABLE / 503)."""

    def __init__(self, name: str, uri: str, cause: str) -> None:
        super().__init__(f"table {name!r} at {uri}: the store failed: {cause}")
        self.name = name
        self.uri = uri


@contextmanager
def store_errors_named(name: str, uri: str) -> Iterator[None]:
    """delta-rs's OSError of a store that fails (down, refusing the keys) as one line naming
    the table it was working on: StoreUnavailableError, not "Kernel error -> Generic S3
    error"."""
    try:
        yield
    except OSError as exc:
        raise StoreUnavailableError(name, uri, describe(exc)) from None


class SchemaMismatchError(OtelDeltaError):
    """Records or a schema change do not fit the table; a breaking change is never applied."""

    def __init__(self, message: str, expected: str, actual: str) -> None:
        super().__init__(f"{message} (expected {expected}, got {actual})")
        self.expected = expected
        self.actual = actual


class ConcurrentModificationError(OtelDeltaError):
    """Another writer kept changing the same data; the operation gave up after bounded retries."""

    def __init__(self, table: str, version: int | None, attempts: int, cause: str = "") -> None:
        detail = f": {cause}" if cause else ""
        super().__init__(
            f"table {table!r} was modified concurrently (at version {version}); "
            f"gave up after {attempts} attempt(s){detail}"
        )
        self.table = table
        self.version = version
        self.attempts = attempts


class LeaseHeldError(OtelDeltaError):
    """Another process holds the table's maintenance lease (engines/lease.py): it alone
    rewrites the table's files until the lease ends, so this rewrite is not run."""

    def __init__(self, table: str, until_ms: int) -> None:
        until = dt.datetime.fromtimestamp(until_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        super().__init__(
            f"table {table!r} is being maintained by another process (its maintenance lease "
            f"runs until {until} unless that process stops first); its files are rewritten "
            "there: run this where that maintenance runs, or after it stops"
        )
        self.table = table
        self.until_ms = until_ms


class InvalidPredicateError(OtelDeltaError):
    """A filter/delete condition is not a valid predicate on the table's columns."""

    def __init__(self, message: str, predicate: str, column: str | None = None) -> None:
        super().__init__(f"invalid predicate {predicate!r}: {message}")
        self.predicate = predicate
        self.column = column


class PartitionNotFoundError(OtelDeltaError):
    """An operation targets a partition value the table does not have."""

    def __init__(self, table: str, partition: str) -> None:
        super().__init__(f"table {table!r} has no partition {partition}")
        self.table = table
        self.partition = partition


class InvalidQueryError(InvalidPredicateError):
    """A query argument (column list, limit, version, timestamp) is invalid."""

    def __init__(self, message: str, column: str | None = None) -> None:
        OtelDeltaError.__init__(self, message)
        self.predicate = ""
        self.column = column


class VersionNotFoundError(OtelDeltaError):
    """Time travel to a version or timestamp the table does not have (or has vacuumed)."""

    def __init__(self, table: str, target: str, reason: str = "") -> None:
        super().__init__(
            f"table {table!r} has no version {target}" + (f": {reason}" if reason else "")
        )
        self.table = table
        self.target = target


class MissingDependencyError(OtelDeltaError):
    """An optional dependency (e.g. pandas) is needed for this call."""


class OperationDisabledError(OtelDeltaError):
    """The operation is switched off in [deltalake.operations]."""


class UsageError(OtelDeltaError):
    """A command line that cannot be run as given (one line for the user, exit 2)."""


class Aborted(OtelDeltaError):
    """The user answered no to a confirmation (exit 1)."""


class BackfillError(OtelDeltaError):
    """A backfill cannot start (e.g. a path does not exist); the message is one line."""


class SparkSetupError(OtelDeltaError):
    """Spark cannot start as configured (e.g. Delta's jars were never fetched)."""


class StreamFailedError(OtelDeltaError):
    """The streaming query stopped with an error (Spark's, first line): the job failed, its
    next start resumes from its checkpoint (exit 1)."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"stream failed: {cause}")
