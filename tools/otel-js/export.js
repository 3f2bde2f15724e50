// One export of each signal through the OpenTelemetry JS SDK's own OTLP exporters, as a Node
// service sends them: `node export.js <protocol> <endpoint> <service>`, protocol one of
// http/json (the JS SDK's default), http/protobuf or grpc; endpoint the bridge's base URL
// (http://127.0.0.1:4318 or, for grpc, http://127.0.0.1:4317). Prints, as one JSON line, what
// the SDK recorded (its in-memory exporters' copies) for the test to compare with the tables;
// exits 1 if an exporter reports anything but success. Run with NODE_PATH at the node_modules
// of tools/otel-js/package.json (make js-sdk installs them).
"use strict";

const api = require("@opentelemetry/api");
const { SeverityNumber } = require("@opentelemetry/api-logs");
const { resourceFromAttributes } = require("@opentelemetry/resources");
const trace = require("@opentelemetry/sdk-trace");
const logs = require("@opentelemetry/sdk-logs");
const metrics = require("@opentelemetry/sdk-metrics");

const [protocol, endpoint, service] = process.argv.slice(2);
const EXPORTERS = {
  "http/json": ["exporter-trace-otlp-http", "exporter-logs-otlp-http", "exporter-metrics-otlp-http"],
  "http/protobuf": ["exporter-trace-otlp-proto", "exporter-logs-otlp-proto", "exporter-metrics-otlp-proto"],
  grpc: ["exporter-trace-otlp-grpc", "exporter-logs-otlp-grpc", "exporter-metrics-otlp-grpc"],
};
if (!EXPORTERS[protocol] || !endpoint || !service) {
  console.error("usage: node export.js http/json|http/protobuf|grpc <endpoint> <service>");
  process.exit(2);
}
const [traceModule, logsModule, metricsModule] = EXPORTERS[protocol].map((name) =>
  require(`@opentelemetry/${name}`),
);
const url = (path) => (protocol === "grpc" ? endpoint : `${endpoint}/v1/${path}`);

const resource = resourceFromAttributes({
  "service.name": service,
  "deployment.environment.name": "test",
  "process.pid": 4242,
  "telemetry.sdk.language": "nodejs",
});

const nanos = (hrTime) => (BigInt(hrTime[0]) * 1000000000n + BigInt(hrTime[1])).toString();

function exported(exporter, items) {
  return new Promise((resolve, reject) =>
    exporter.export(items, (result) =>
      result.code === 0 ? resolve() : reject(result.error || new Error(`code ${result.code}`)),
    ),
  );
}

async function sendSpans() {
  const memory = new trace.InMemorySpanExporter();
  const provider = new trace.TracerProvider({
    resource,
    spanProcessors: [new trace.SimpleSpanProcessor({ exporter: memory })],
  });
  const tracer = provider.getTracer("js.tracer", "1.2.3");
  const parent = tracer.startSpan("GET /orders/{id}", {
    kind: api.SpanKind.SERVER,
    attributes: { "http.request.method": "GET", "http.route": "/orders/{id}" },
  });
  const context = api.trace.setSpan(api.context.active(), parent);
  const child = tracer.startSpan(
    "SELECT orders",
    {
      kind: api.SpanKind.CLIENT,
      attributes: {
        "db.system.name": "postgresql",
        "db.response.returned_rows": 3,
        ratio: 0.25,
        cached: false,
        tags: ["a", "b"],
        "naïve ключ": "ünïcode ✓",
      },
      links: [{ context: parent.spanContext(), attributes: { "link.kind": "follows" } }],
    },
    context,
  );
  child.addEvent("exception", {
    "exception.type": "Error",
    "exception.message": "connection reset",
    "exception.stacktrace": "Error: connection reset\n    at query (db.js:10:5)",
  });
  child.setStatus({ code: api.SpanStatusCode.ERROR, message: "connection reset" });
  child.end();
  parent.setStatus({ code: api.SpanStatusCode.OK });
  parent.end();
  await provider.forceFlush();
  const spans = memory.getFinishedSpans();
  await exported(new traceModule.OTLPTraceExporter({ url: url("traces") }), spans);
  return spans.map((s) => ({
    trace_id: s.spanContext().traceId,
    span_id: s.spanContext().spanId,
    parent_span_id: s.parentSpanContext ? s.parentSpanContext.spanId : null,
    name: s.name,
    kind: s.kind,
    start: nanos(s.startTime),
    end: nanos(s.endTime),
    attributes: s.attributes,
    events: s.events.map((e) => ({ name: e.name, time: nanos(e.time), attributes: e.attributes })),
    links: s.links.map((l) => ({ span_id: l.context.spanId, attributes: l.attributes })),
    status: s.status,
    scope: [s.instrumentationScope.name, s.instrumentationScope.version],
  }));
}

async function sendLogs(traceId, spanId) {
  const memory = new logs.InMemoryLogRecordExporter();
  const provider = new logs.LoggerProvider({
    resource,
    processors: [new logs.SimpleLogRecordProcessor({ exporter: memory })],
  });
  const logger = provider.getLogger("js.logger", "4.5.6");
  const spanContext = { traceId, spanId, traceFlags: api.TraceFlags.SAMPLED };
  const context = api.trace.setSpanContext(api.context.active(), spanContext);
  logger.emit({
    severityNumber: SeverityNumber.ERROR,
    severityText: "ERROR",
    body: "order 42 failed: connection reset",
    attributes: { "order.id": 42, "retry.allowed": true },
    context,
  });
  logger.emit({
    severityNumber: SeverityNumber.INFO,
    severityText: "INFO",
    body: { event: "checkout", items: [1, 2], total: 9.5 },
    attributes: { "user.tier": "gold" },
  });
  await provider.forceFlush();
  const records = memory.getFinishedLogRecords();
  await exported(new logsModule.OTLPLogExporter({ url: url("logs") }), records);
  return records.map((r) => ({
    time: nanos(r.hrTime),
    observed: nanos(r.hrTimeObserved),
    severity_number: r.severityNumber,
    severity_text: r.severityText,
    body: r.body,
    attributes: r.attributes,
    trace_id: r.spanContext ? r.spanContext.traceId : null,
    span_id: r.spanContext ? r.spanContext.spanId : null,
  }));
}

class CollectingReader extends metrics.MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

async function sendMetrics() {
  const reader = new CollectingReader();
  const provider = new metrics.MeterProvider({ resource, readers: [reader] });
  const meter = provider.getMeter("js.meter", "7.8.9");
  meter.createCounter("orders.placed", { unit: "{order}" }).add(5, { region: "eu" });
  meter.createUpDownCounter("queue.depth").add(-2);
  meter.createHistogram("http.server.request.duration", { unit: "s" }).record(0.125, {
    "http.route": "/orders/{id}",
  });
  meter.createGauge("cpu.temperature", { unit: "Cel" }).record(21.5, { core: "0" });
  const { resourceMetrics, errors } = await reader.collect();
  if (errors.length) throw errors[0];
  await exported(new metricsModule.OTLPMetricExporter({ url: url("metrics") }), resourceMetrics);
  const points = {};
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      points[metric.descriptor.name] = metric.dataPoints.map((p) => ({
        start: nanos(p.startTime),
        time: nanos(p.endTime),
        value: p.value,
        attributes: p.attributes,
      }));
    }
  }
  return points;
}

(async () => {
  const spans = await sendSpans();
  const child = spans.find((s) => s.parent_span_id);
  const records = await sendLogs(child.trace_id, child.span_id);
  const points = await sendMetrics();
  process.stdout.write(JSON.stringify({ spans, logs: records, metrics: points }) + "\n");
})().catch((error) => {
  console.error(`export failed: ${error && error.message ? error.message : error}`);
  process.exit(1);
});
