// A span whose attribute value the SDK's own length limit cuts in the middle of an emoji: the
// JS SDK truncates by UTF-16 code units (`attributeValueLengthLimit`), so the value ends in a
// lone surrogate, which its http/json exporter sends as the JSON escape "\ud83d" (its protobuf
// exporters encode it as U+FFFD themselves). `node truncated.js <protocol>
// <endpoint> <service>` as export.js; prints the recorded attributes as one JSON line (the lone
// surrogate escaped); exits 1 if the exporter reports anything but success.
"use strict";

const { resourceFromAttributes } = require("@opentelemetry/resources");
const trace = require("@opentelemetry/sdk-trace");

const [protocol, endpoint, service] = process.argv.slice(2);
const MODULES = {
  "http/json": "exporter-trace-otlp-http",
  "http/protobuf": "exporter-trace-otlp-proto",
  grpc: "exporter-trace-otlp-grpc",
};
if (!MODULES[protocol] || !endpoint || !service) {
  console.error("usage: node truncated.js http/json|http/protobuf|grpc <endpoint> <service>");
  process.exit(2);
}
const { OTLPTraceExporter } = require(`@opentelemetry/${MODULES[protocol]}`);

async function main() {
  const memory = new trace.InMemorySpanExporter();
  const provider = new trace.TracerProvider({
    resource: resourceFromAttributes({ "service.name": service }),
    spanLimits: { attributeValueLengthLimit: 5 },
    spanProcessors: [new trace.SimpleSpanProcessor({ exporter: memory })],
  });
  const span = provider.getTracer("js.truncated").startSpan("truncated", {
    attributes: { text: "abcd\u{1F600}xyz", plain: "ok" },
  });
  span.end();
  await provider.forceFlush();
  const spans = memory.getFinishedSpans();
  const url = protocol === "grpc" ? endpoint : `${endpoint}/v1/traces`;
  await new Promise((resolve, reject) =>
    new OTLPTraceExporter({ url }).export(spans, (result) =>
      result.code === 0 ? resolve() : reject(result.error || new Error(`code ${result.code}`)),
    ),
  );
  console.log(JSON.stringify(spans.map((s) => ({ span_id: s.spanContext().spanId, attributes: s.attributes }))));
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(String(error));
    process.exit(1);
  },
);
