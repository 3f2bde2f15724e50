"""The admin endpoint (`[admin] endpoint`): /healthz, /readyz and /metrics, for load balancers,
Kubernetes probes and Prometheus.

- /healthz: 200 while the process serves HTTP at all (liveness).
- /readyz: 200 when every readiness check passes, else 503; the body (JSON) says which failed.
- /metrics: the Prometheus text format of otel_delta.metrics, the process metrics of the
  client library, and the gauges of the running bridge, read at scrape time.

Plain HTTP on its own port (default 127.0.0.1 only): it carries no telemetry and no secrets.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from aiohttp import web
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from otel_delta.config import AdminSettings
from otel_delta.net import bound_endpoint, http_runner, serve_http


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Gauge:
    name: str  # without the otel_delta_ prefix
    help: str
    value: float
    # label name → value; gauges of one name (a series each) carry the same label names
    labels: tuple[tuple[str, str], ...] = ()


class _GaugeCollector(Collector):
    """Reads the running bridge's gauges each time Prometheus scrapes."""

    def __init__(self, gauges: Callable[[], list[Gauge]]) -> None:
        self._gauges = gauges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        for gauge in self._gauges():
            family = families.get(gauge.name)
            if family is None:
                family = families[gauge.name] = GaugeMetricFamily(
                    f"otel_delta_{gauge.name}", gauge.help, labels=[k for k, _ in gauge.labels]
                )
            family.add_metric([v for _, v in gauge.labels], gauge.value)
        yield from families.values()

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # names vary with the configuration: no check at registration


class AdminServer:
    def __init__(
        self,
        settings: AdminSettings,
        checks: Callable[[], list[Check]],
        gauges: Callable[[], list[Gauge]],
        key: str = "admin.endpoint",
    ) -> None:
        self.settings = settings
        self._key = key  # the setting named in a ConfigError
        self._checks = checks
        self._collector = _GaugeCollector(gauges)
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = http_runner(app)
        self.port = 0

    async def start(self) -> int:
        self.port = await serve_http(self._runner, self.settings.endpoint, self._key)
        REGISTRY.register(self._collector)
        return self.port

    @property
    def endpoint(self) -> str:
        return bound_endpoint(self.settings.endpoint, self.port)

    async def stop(self) -> None:
        REGISTRY.unregister(self._collector)
        await self._runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = self._checks()
        ready = all(check.ok for check in checks)
        body = {"ready": ready, "checks": [asdict(check) for check in checks]}
        return web.Response(
            status=200 if ready else 503,
            text=json.dumps(body) + "\n",
            content_type="application/json",
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
        )


class AdminThread:
    """An AdminServer for a process that is not asyncio (`otel-delta stream`): its own event
    loop on a daemon thread. `start` returns once it listens (or raises its ConfigError)."""

    def __init__(
        self,
        settings: AdminSettings,
        checks: Callable[[], list[Check]],
        gauges: Callable[[], list[Gauge]],
        key: str,
    ) -> None:
        self.server = AdminServer(settings, checks, gauges, key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="admin", daemon=True)

    def start(self) -> str:
        """Listen; returns the endpoint listened on."""
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(60)
        except BaseException:
            self._halt()
            raise
        return self.server.endpoint

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(60)
        self._halt()

    def _halt(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
