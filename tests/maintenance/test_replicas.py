"""Two `otel-delta serve` replicas on one local lake, both running maintenance: when the one
holding a table's maintenance lease is killed (`kill -9`), the other takes the lease over once
it runs out and maintains the table from then on; the killed one, restarted on its write-ahead
log, replays what it had acknowledged, and every span is stored once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from otel_delta.engines.lease import LEASE_APP_ID
from tests.helpers import LOOPBACK, ServeProcess, wait_until
from tests.s3.test_serve_s3 import load_today, maintenance_runs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LEASE_SECONDS = 10  # the least the settings allow: the takeover waits for it to run out


def replica_config(tmp_path: Path, index: int) -> Path:
    config = tmp_path / f"replica{index}.toml"
    config.write_text(
        LOOPBACK
        + "[buffer]\nflush_interval_seconds = 0.5\nmax_rows = 200\n"
        + f'[wal]\ndir = "{tmp_path / f"wal{index}"}"\n'
        + f'[deltalake]\ntable_path = "{tmp_path / "lake"}"\n'
        + "[deltalake.table]\nmaintenance_interval_seconds = 0.5\n"
        + "open_partition_compaction_age_seconds = 0.5\n"
        + f"maintenance_lease_seconds = {LEASE_SECONDS}\n"
        + '[deltalake.operations]\nengine = "delta-rs"\n'
    )
    return config


def compactions(uri: str) -> int:
    return sum(
        1 for e in DeltaTable(uri).history() if e.get("otel_delta.operation") == "compaction"
    )


def test_a_killed_lease_holder_is_replaced_and_its_acked_spans_replayed(tmp_path: Path) -> None:
    configs = [replica_config(tmp_path, i) for i in range(2)]
    replicas = [ServeProcess(config) for config in configs]
    uri = str(tmp_path / "lake" / "spans")
    acked: list[str] = []
    stops = [threading.Event(), threading.Event()]
    loads = [
        threading.Thread(target=load_today, args=(replicas[c % 2].endpoint, c, stops[c % 2], acked))
        for c in range(4)
    ]
    try:
        for load in loads:
            load.start()

        def skipped(i: int) -> float:
            return maintenance_runs(replicas[i], "open_compaction", "skipped")

        # one of them holds the lease: the other skips its rewrites
        wait_until(lambda: skipped(0) or skipped(1), 120, "a replica leaving rewrites to the other")
        holder = 1 if skipped(0) else 0
        survivor = 1 - holder
        assert not skipped(holder)
        lease = DeltaTable(uri).transaction_version(LEASE_APP_ID)

        stops[holder].set()  # its clients stop with it
        replicas[holder].kill9()
        before = compactions(uri)
        # the survivor takes the lease once the dead one's has run out, and compacts again
        wait_until(
            lambda: DeltaTable(uri).transaction_version(LEASE_APP_ID) != lease,
            LEASE_SECONDS * 6,
            "the survivor taking the lease over",
        )
        wait_until(lambda: compactions(uri) > before, 60, "the survivor compacting")
        stops[survivor].set()
        for load in loads:
            load.join(30)
        # the killed replica restarts on its write-ahead log: what it acknowledged lands
        replicas[holder] = ServeProcess(configs[holder])
    finally:
        for stop in stops:
            stop.set()
        codes = [replica.stop() for replica in replicas if replica.proc.poll() is None]
    assert codes and all(code == 0 for code in codes), "".join(replicas[survivor].lines)

    assert len(acked) > 500, "too little load to mean anything"
    stored = DeltaTable(uri).to_pyarrow_table(columns=["span_id"]).column("span_id").to_pylist()
    assert len(stored) == len(set(stored)), f"{len(stored) - len(set(stored))} span(s) twice"
    assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acked span(s) lost"
