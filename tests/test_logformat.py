"""The log's format (otel_delta/logformat.py): what Python prints on stderr by itself comes
through the log, so a JSON log stays JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

STRAY_ERRORS = textwrap.dedent(
    """
    import logging, sys, threading
    from otel_delta.logformat import route_stray_errors, use_json_logs

    logging.basicConfig(stream=sys.stderr)
    use_json_logs()
    route_stray_errors()

    class Closing:
        def __del__(self):
            raise RuntimeError("file metadata is only available after writer close")

    Closing()
    thread = threading.Thread(target=lambda: 1 / 0, name="committer")
    thread.start()
    thread.join()
    """
)


def test_an_exception_in_a_destructor_or_a_thread_is_a_json_log_line() -> None:
    """Seen with compaction failing: pyarrow's ParquetWriter, closed by its `__del__`, raised,
    and Python printed "Exception ignored in: ..." with a traceback among the JSON lines."""
    done = subprocess.run(
        [sys.executable, "-c", STRAY_ERRORS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stderr.splitlines()]  # every line JSON
    assert [e["level"] for e in entries] == ["WARNING", "ERROR"]
    assert (
        "RuntimeError: file metadata is only available after writer close" in entries[0]["message"]
    )
    assert entries[1]["message"] == "committer ended on an error"
    assert "ZeroDivisionError" in entries[1]["exception"]
