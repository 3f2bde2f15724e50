"""gRPC's process-wide settings (otel_delta/grpcenv.py), as a process that imported the CLI has
them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.tools import ROOT

# a process like the bridge: the CLI imported first, then a gRPC server running, then children
# made the way PySpark starts its JVM (fork, Python in the child, close_fds, exec)
FORKING_SERVER = """
import asyncio, subprocess
import otel_delta.cli  # noqa: F401
from grpc import aio

async def main():
    server = aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()
    for _ in range(5):
        await asyncio.to_thread(subprocess.run, ["true"], preexec_fn=lambda: None, check=True)
    await server.stop(0)

asyncio.run(main())
"""


def test_no_fork_handlers_run_in_the_children_of_a_serving_process() -> None:
    """gRPC's fork handlers restarted its poller in each such child, where close_fds had closed
    its epoll descriptor: gRPC aborted the child now and then (SIGABRT; a bridge that did not
    start under load, once in about twenty tries here). With them on, gRPC says at INFO that it
    runs or skips them on every fork; now it has nothing to say."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    env["GRPC_VERBOSITY"] = "INFO"  # kept by grpcenv: the fork handlers' lines show
    child = subprocess.run(
        [sys.executable, "-c", FORKING_SERVER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    forks = [line for line in child.stderr.splitlines() if "fork_posix" in line]
    assert not forks, forks
