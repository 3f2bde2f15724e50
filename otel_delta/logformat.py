"""`[logging] format = "json"`: one JSON object per log line, for log shippers (Fluent Bit,
Vector, the Collector's filelog receiver) that would otherwise have to parse free text."""

from __future__ import annotations

import json
import logging
import time


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
