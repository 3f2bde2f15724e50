"""A throwaway Spark standalone cluster (master + one worker on 127.0.0.1) from pyspark's own
distribution: for the cluster test and the backfill benchmark, not for production."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STARTUP_SECONDS = 120


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_env() -> dict[str, str]:
    """Environment of the cluster's JVMs and of drivers talking to it."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }


def _spark_class(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=spark_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as a whole
        )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:<port>
    ui_port: int

    def state(self) -> dict:
        """The master's JSON status (workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def application_names(self) -> list[str]:
        state = self.state()
        return [a["name"] for a in state.get("activeapps", []) + state.get("completedapps", [])]


@contextmanager
def standalone_cluster(logs: Path, cores: int = 1, memory: str = "1g") -> Iterator[Cluster]:
    """Start a master and one worker; both are stopped however the block ends."""
    port, ui_port = free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", ui_port)
    master = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)]
    processes = [_spark_class(["org.apache.spark.deploy.master.Master", *master], logs / "m.log")]
    try:
        worker = ["--host", "127.0.0.1", "--cores", str(cores), "--memory", memory]
        worker += ["--webui-port", str(free_port()), cluster.url]
        processes.append(
            _spark_class(["org.apache.spark.deploy.worker.Worker", *worker], logs / "w.log")
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                if cluster.state().get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            if any(p.poll() is not None for p in processes):
                raise RuntimeError(f"Spark master or worker exited; see {logs}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no Spark worker registered within {STARTUP_SECONDS} s")
            time.sleep(1)
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)
