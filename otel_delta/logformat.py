"""`[logging] format = "json"`: one JSON object per log line, for log shippers (Fluent Bit,
Vector, the Collector's filelog receiver) that would otherwise have to parse free text."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from otel_delta.errors import first_line

log = logging.getLogger("otel_delta")


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message"[, "exception"]}`, time in RFC 3339 UTC."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def use_json_logs() -> None:
    """Switch every handler of the root logger to JSON lines."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter())


def _unraisable(unraisable: Any) -> None:
    """An exception Python could not raise (in a `__del__`, e.g. pyarrow's ParquetWriter
    closing after a failed write): one WARNING line. Python printed a traceback on stderr,
    which is not JSON and broke `format = "json"` for log shippers."""
    error = unraisable.exc_value
    where = unraisable.err_msg or "Exception ignored"
    log.warning(
        "%s in %r: %s: %s", where, unraisable.object, type(error).__name__, first_line(error)
    )


def _thread_died(died: threading.ExceptHookArgs) -> None:
    """A thread that ended on an exception: logged (with its traceback, in the log's format)
    instead of printed on stderr."""
    if died.exc_type is SystemExit:
        return
    name = died.thread.name if died.thread is not None else "a thread"
    log.error(
        "%s ended on an error", name, exc_info=(died.exc_type, died.exc_value, died.exc_traceback)
    )


def route_stray_errors() -> None:
    """Send what Python would print on stderr past the logging (exceptions in `__del__`,
    threads ending on an exception) through the log instead."""
    sys.unraisablehook = _unraisable
    threading.excepthook = _thread_died


class HeldLogs(logging.Handler):
    """The log records of a block whose end decides the format (`logs_held`)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def write_out(self) -> None:
        """Write the held records through the root logger's handlers, as they are now."""
        root = logging.getLogger()
        for record in self.records:
            root.handle(record)
        self.records.clear()


@contextmanager
def logs_held() -> Iterator[HeldLogs]:
    """Hold the records logged in the block (the configuration's own warnings, logged while it
    loads) until `write_out`, so that they come out in the format it chooses: written at once,
    a JSON log began with text lines a shipper cannot parse. A block that raises writes them
    at once (the error follows them)."""
    root = logging.getLogger()
    held = HeldLogs()
    handlers, root.handlers = root.handlers, [held]
    try:
        yield held
    except BaseException:
        root.handlers = handlers
        held.write_out()
        raise
    root.handlers = handlers
