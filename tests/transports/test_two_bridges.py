"""Two bridge processes' worth of writers on one table path: blind appends must all land."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import RunningBridge, make_settings, read_table
from tests.test_cli import one_span_request

pytestmark = pytest.mark.e2e


def test_two_bridges_share_a_lakehouse(lakehouse) -> None:
    first, second = RunningBridge(make_settings(lakehouse)), RunningBridge(make_settings(lakehouse))
    try:
        stubs = [b.stubs(b.channel())[0] for b in (first, second)]

        def send(i: int) -> None:
            stubs[i % 2].Export(one_span_request(i))

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(send, range(1, 201)))
    finally:
        first.stop()
        second.stop()
    names = read_table(lakehouse, "spans")["name"].to_pylist()
    assert sorted(names) == sorted(f"s{i}" for i in range(1, 201))
    assert first.bridge.buffer.stats.commits > 1 and second.bridge.buffer.stats.commits > 1
