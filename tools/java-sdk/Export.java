// A bounded export of each signal through the OpenTelemetry Java SDK's own OTLP exporters, set up
// as a Java service sets them up (batch span and log processors, a periodic metric reader):
//
//   java -cp <classes>:<libs>/* Export <grpc|http/protobuf> <endpoint> <service>
//        [--traces N] [--gzip] [--token TOKEN] [--ca PEM] [--client-cert PEM --client-key PEM]
//        [--no-retry] [--immutable-data]
//
// endpoint is the bridge's base URL (http://127.0.0.1:4317 for grpc, http://127.0.0.1:4318 for
// http/protobuf; https:// with --ca, and --client-cert/--client-key for mTLS). Each trace is a
// SERVER span and a CLIENT child (attributes of every type, an event, a link, a status); then
// two log records, and a counter, a histogram, a gauge and an exponential histogram, with
// exemplars of the first child span. The providers are flushed and shut down, and what the SDK
// handed to its exporters is printed as one JSON line for the test to compare with the tables.
// Exits 1 if any export failed (the exporter's own error on stderr), 2 on bad arguments.
// `make java-sdk` builds it.

import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.AttributeType;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.KeyValue;
import io.opentelemetry.api.common.Value;
import io.opentelemetry.api.logs.Logger;
import io.opentelemetry.api.logs.Severity;
import io.opentelemetry.api.metrics.DoubleGauge;
import io.opentelemetry.api.metrics.DoubleHistogram;
import io.opentelemetry.api.metrics.LongCounter;
import io.opentelemetry.api.metrics.Meter;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Context;
import io.opentelemetry.exporter.otlp.http.logs.OtlpHttpLogRecordExporter;
import io.opentelemetry.exporter.otlp.http.metrics.OtlpHttpMetricExporter;
import io.opentelemetry.exporter.otlp.http.trace.OtlpHttpSpanExporter;
import io.opentelemetry.exporter.otlp.logs.OtlpGrpcLogRecordExporter;
import io.opentelemetry.exporter.otlp.metrics.OtlpGrpcMetricExporter;
import io.opentelemetry.exporter.otlp.trace.OtlpGrpcSpanExporter;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.common.export.MemoryMode;
import io.opentelemetry.sdk.common.export.RetryPolicy;
import io.opentelemetry.sdk.logs.SdkLoggerProvider;
import io.opentelemetry.sdk.logs.data.LogRecordData;
import io.opentelemetry.sdk.logs.export.BatchLogRecordProcessor;
import io.opentelemetry.sdk.logs.export.LogRecordExporter;
import io.opentelemetry.sdk.metrics.Aggregation;
import io.opentelemetry.sdk.metrics.InstrumentSelector;
import io.opentelemetry.sdk.metrics.InstrumentType;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.View;
import io.opentelemetry.sdk.metrics.data.AggregationTemporality;
import io.opentelemetry.sdk.metrics.data.DoubleExemplarData;
import io.opentelemetry.sdk.metrics.data.DoublePointData;
import io.opentelemetry.sdk.metrics.data.ExemplarData;
import io.opentelemetry.sdk.metrics.data.ExponentialHistogramBuckets;
import io.opentelemetry.sdk.metrics.data.ExponentialHistogramPointData;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongExemplarData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.PointData;
import io.opentelemetry.sdk.metrics.export.MetricExporter;
import io.opentelemetry.sdk.metrics.export.PeriodicMetricReader;
import io.opentelemetry.sdk.resources.Resource;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.EventData;
import io.opentelemetry.sdk.trace.data.LinkData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.BatchSpanProcessor;
import io.opentelemetry.sdk.trace.export.SpanExporter;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

public final class Export {
  private final String protocol;
  private final String endpoint;
  private final Map<String, String> headers = new LinkedHashMap<>();
  private String compression = "none";
  private byte[] ca;
  private byte[] clientKey;
  private byte[] clientCert;
  private RetryPolicy retry = RetryPolicy.getDefault();
  private MemoryMode memory = MemoryMode.REUSABLE_DATA; // the exporters' default

  // what the SDK handed to the exporters, as JSON-ready maps, and each export's outcome
  private final List<Object> spans = new ArrayList<>();
  private final List<Object> logs = new ArrayList<>();
  private final List<Object> points = new ArrayList<>();
  private final List<CompletableResultCode> results = new ArrayList<>();

  private Export(String protocol, String endpoint) {
    this.protocol = protocol;
    this.endpoint = endpoint;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 3 || !(args[0].equals("grpc") || args[0].equals("http/protobuf"))) {
      usage();
    }
    Export run = new Export(args[0], args[1]);
    String service = args[2];
    int traces = 1;
    for (int i = 3; i < args.length; i++) {
      switch (args[i]) {
        case "--gzip" -> run.compression = "gzip";
        case "--no-retry" -> run.retry = null;
        case "--immutable-data" -> run.memory = MemoryMode.IMMUTABLE_DATA;
        case "--traces" -> traces = Integer.parseInt(value(args, ++i));
        case "--token" -> run.headers.put("Authorization", "Bearer " + value(args, ++i));
        case "--ca" -> run.ca = Files.readAllBytes(Path.of(value(args, ++i)));
        case "--client-cert" -> run.clientCert = Files.readAllBytes(Path.of(value(args, ++i)));
        case "--client-key" -> run.clientKey = Files.readAllBytes(Path.of(value(args, ++i)));
        default -> usage();
      }
    }
    Resource resource =
        Resource.getDefault()
            .merge(
                Resource.create(
                    Attributes.builder()
                        .put("service.name", service)
                        .put("deployment.environment.name", "test")
                        .put("process.pid", 4242L)
                        .build()));
    List<String> contexts = run.sendSpans(resource, traces);
    run.sendLogs(resource, contexts.get(0), contexts.get(1));
    run.sendMetrics(resource, contexts.get(0), contexts.get(1));

    boolean failed = false;
    for (CompletableResultCode result : run.results) {
      result.join(60, TimeUnit.SECONDS);
      if (!result.isSuccess()) {
        failed = true;
        Throwable cause = result.getFailureThrowable();
        System.err.println("export failed: " + (cause == null ? "(no cause given)" : cause));
      }
    }
    if (failed || run.results.isEmpty()) {
      System.exit(1);
    }
    Map<String, Object> sent = new LinkedHashMap<>();
    sent.put("spans", run.spans);
    sent.put("logs", run.logs);
    sent.put("metrics", run.points);
    System.out.println(json(sent));
    System.exit(0);
  }

  private static String value(String[] args, int i) {
    if (i >= args.length) {
      usage();
    }
    return args[i];
  }

  private static void usage() {
    System.err.println(
        "usage: Export grpc|http/protobuf <endpoint> <service> [--traces N] [--gzip]"
            + " [--token TOKEN] [--ca PEM] [--client-cert PEM --client-key PEM] [--no-retry]"
            + " [--immutable-data]");
    System.exit(2);
  }

  // -- exporters: the OTLP ones, set up from the command line, wrapped to record what they got

  private String url(String path) {
    return protocol.equals("grpc") ? endpoint : endpoint + "/v1/" + path;
  }

  private SpanExporter spanExporter() {
    SpanExporter otlp;
    if (protocol.equals("grpc")) {
      var builder = OtlpGrpcSpanExporter.builder().setEndpoint(url("traces"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    } else {
      var builder = OtlpHttpSpanExporter.builder().setEndpoint(url("traces"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    }
    return new SpanExporter() {
      @Override
      public CompletableResultCode export(Collection<SpanData> batch) {
        batch.forEach(span -> spans.add(span(span)));
        return outcome(otlp.export(batch));
      }

      @Override
      public CompletableResultCode flush() {
        return otlp.flush();
      }

      @Override
      public CompletableResultCode shutdown() {
        return otlp.shutdown();
      }
    };
  }

  private LogRecordExporter logExporter() {
    LogRecordExporter otlp;
    if (protocol.equals("grpc")) {
      var builder = OtlpGrpcLogRecordExporter.builder().setEndpoint(url("logs"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    } else {
      var builder = OtlpHttpLogRecordExporter.builder().setEndpoint(url("logs"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    }
    return new LogRecordExporter() {
      @Override
      public CompletableResultCode export(Collection<LogRecordData> batch) {
        batch.forEach(record -> logs.add(log(record)));
        return outcome(otlp.export(batch));
      }

      @Override
      public CompletableResultCode flush() {
        return otlp.flush();
      }

      @Override
      public CompletableResultCode shutdown() {
        return otlp.shutdown();
      }
    };
  }

  private MetricExporter metricExporter() {
    MetricExporter otlp;
    if (protocol.equals("grpc")) {
      var builder = OtlpGrpcMetricExporter.builder().setEndpoint(url("metrics"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    } else {
      var builder = OtlpHttpMetricExporter.builder().setEndpoint(url("metrics"));
      builder.setCompression(compression).setRetryPolicy(retry).setMemoryMode(memory);
      headers.forEach(builder::addHeader);
      if (ca != null) {
        builder.setTrustedCertificates(ca);
      }
      if (clientCert != null) {
        builder.setClientTls(clientKey, clientCert);
      }
      otlp = builder.build();
    }
    return new MetricExporter() {
      @Override
      public AggregationTemporality getAggregationTemporality(InstrumentType type) {
        return otlp.getAggregationTemporality(type);
      }

      @Override
      public Aggregation getDefaultAggregation(InstrumentType type) {
        return otlp.getDefaultAggregation(type);
      }

      @Override
      public MemoryMode getMemoryMode() {
        return otlp.getMemoryMode();
      }

      @Override
      public CompletableResultCode export(Collection<MetricData> batch) {
        batch.forEach(metric -> points.addAll(metric(metric))); // now: points may be reused
        return outcome(otlp.export(batch));
      }

      @Override
      public CompletableResultCode flush() {
        return otlp.flush();
      }

      @Override
      public CompletableResultCode shutdown() {
        return otlp.shutdown();
      }
    };
  }

  private synchronized CompletableResultCode outcome(CompletableResultCode result) {
    results.add(result);
    return result;
  }

  // -- the telemetry

  /** Sends `traces` traces of two spans; returns the trace and span id of the first child. */
  private List<String> sendSpans(Resource resource, int traces) {
    SdkTracerProvider provider =
        SdkTracerProvider.builder()
            .setResource(resource)
            .addSpanProcessor(BatchSpanProcessor.builder(spanExporter()).build())
            .build();
    Tracer tracer = provider.get("java.tracer", "1.2.3");
    List<String> first = null;
    for (int i = 0; i < traces; i++) {
      Span parent =
          tracer
              .spanBuilder("GET /orders/{id}")
              .setSpanKind(SpanKind.SERVER)
              .setAttribute("http.request.method", "GET")
              .setAttribute("http.route", "/orders/{id}")
              .setAttribute("order.index", i)
              .startSpan();
      Span child =
          tracer
              .spanBuilder("SELECT orders")
              .setParent(Context.current().with(parent))
              .setSpanKind(SpanKind.CLIENT)
              .addLink(
                  parent.getSpanContext(),
                  Attributes.of(AttributeKey.stringKey("link.kind"), "follows"))
              .setAttribute("db.system.name", "postgresql")
              .setAttribute("db.response.returned_rows", 3L)
              .setAttribute("ratio", 0.25)
              .setAttribute("cached", false)
              .setAttribute(AttributeKey.stringArrayKey("tags"), List.of("a", "b"))
              .setAttribute(AttributeKey.longArrayKey("shards"), List.of(1L, -2L))
              .setAttribute(AttributeKey.doubleArrayKey("weights"), List.of(0.5, 1.5))
              .setAttribute(AttributeKey.booleanArrayKey("flags"), List.of(true, false))
              .setAttribute("naïve ключ", "ünïcode ✓")
              .setAttribute(AttributeKey.valueKey("db.query.parameters"), parameters())
              .setAttribute(AttributeKey.valueKey("db.query.digest"), Value.of(new byte[] {1, 2}))
              .startSpan();
      child.addEvent(
          "exception",
          Attributes.builder()
              .put("exception.type", "java.net.SocketException")
              .put("exception.message", "Connection reset")
              .put("exception.escaped", true)
              .build());
      child.setStatus(StatusCode.ERROR, "Connection reset");
      child.end();
      parent.setStatus(StatusCode.OK);
      parent.end();
      if (first == null) {
        first = List.of(child.getSpanContext().getTraceId(), child.getSpanContext().getSpanId());
      }
    }
    provider.forceFlush().join(60, TimeUnit.SECONDS);
    provider.shutdown().join(60, TimeUnit.SECONDS);
    return first;
  }

  private void sendLogs(Resource resource, String traceId, String spanId) {
    SdkLoggerProvider provider =
        SdkLoggerProvider.builder()
            .setResource(resource)
            .addLogRecordProcessor(BatchLogRecordProcessor.builder(logExporter()).build())
            .build();
    Logger logger = provider.get("java.logger");
    long now = System.currentTimeMillis();
    logger
        .logRecordBuilder()
        .setTimestamp(now - 5, TimeUnit.MILLISECONDS)
        .setContext(Context.current().with(Span.wrap(sampled(traceId, spanId))))
        .setSeverity(Severity.ERROR)
        .setSeverityText("ERROR")
        .setBody("order 42 failed: Connection reset")
        .setAttribute("order.id", 42L)
        .setAttribute("retry.allowed", true)
        .setAttribute("db.query.parameters", parameters())
        .emit();
    Map<String, Value<?>> body = new LinkedHashMap<>();
    body.put("event", Value.of("checkout"));
    body.put("items", Value.of(Value.of(1L), Value.of(2L)));
    body.put("total", Value.of(9.5));
    logger
        .logRecordBuilder()
        .setTimestamp(now, TimeUnit.MILLISECONDS)
        .setSeverity(Severity.INFO2)
        .setSeverityText("INFO")
        .setEventName("shop.checkout")
        .setBody(Value.of(body))
        .setAttribute("user.tier", "gold")
        .emit();
    provider.forceFlush().join(60, TimeUnit.SECONDS);
    provider.shutdown().join(60, TimeUnit.SECONDS);
  }

  /**
   * A counter, a histogram, a gauge and an exponential histogram (by a view, which also keeps
   * one attribute of its measurements: the others go to its exemplars' filtered attributes).
   * The counter and both histograms are recorded in the context of the given (sampled) span, so
   * the SDK's default trace-based filter gives their points exemplars.
   */
  private void sendMetrics(Resource resource, String traceId, String spanId) {
    // an interval longer than the run: the reader exports once, when it is shut down
    SdkMeterProvider provider =
        SdkMeterProvider.builder()
            .setResource(resource)
            .registerMetricReader(
                PeriodicMetricReader.builder(metricExporter())
                    .setInterval(Duration.ofMinutes(10))
                    .build())
            .registerView(
                InstrumentSelector.builder().setName("db.client.operation.duration").build(),
                View.builder()
                    .setAggregation(Aggregation.base2ExponentialBucketHistogram())
                    .setAttributeFilter(Set.of("db.system.name"))
                    .build())
            .build();
    Context span = Context.current().with(Span.wrap(sampled(traceId, spanId)));
    Meter meter = provider.meterBuilder("java.meter").setInstrumentationVersion("7.8.9").build();
    LongCounter counter = meter.counterBuilder("orders.placed").setUnit("{order}").build();
    counter.add(5, Attributes.of(AttributeKey.stringKey("region"), "eu"), span);
    counter.add(2, Attributes.of(AttributeKey.stringKey("region"), "eu"));
    DoubleHistogram histogram =
        meter.histogramBuilder("http.server.request.duration").setUnit("s").build();
    Attributes route = Attributes.of(AttributeKey.stringKey("http.route"), "/orders/{id}");
    histogram.record(0.125, route, span);
    histogram.record(7.5, route);
    DoubleGauge gauge = meter.gaugeBuilder("cpu.temperature").setUnit("Cel").build();
    gauge.set(21.5, Attributes.of(AttributeKey.longKey("core"), 0L));
    DoubleHistogram exponential =
        meter.histogramBuilder("db.client.operation.duration").setUnit("s").build();
    Attributes query =
        Attributes.builder().put("db.system.name", "postgresql").put("db.rows", 3L).build();
    exponential.record(0.002, query, span);
    exponential.record(0.004, query);
    exponential.record(0.0, query);
    provider.shutdown().join(60, TimeUnit.SECONDS);
  }

  /** A map-valued (AttributeType.VALUE) attribute: a map of a long, a string and a list. */
  private static Value<?> parameters() {
    Map<String, Value<?>> map = new LinkedHashMap<>();
    map.put("id", Value.of(42L));
    map.put("name", Value.of("o'brien"));
    map.put("tags", Value.of(Value.of("a"), Value.of(true)));
    return Value.of(map);
  }

  private static SpanContext sampled(String traceId, String spanId) {
    return SpanContext.create(traceId, spanId, TraceFlags.getSampled(), TraceState.getDefault());
  }

  // -- what was sent, as JSON-ready maps (ids as hex, times in ns)

  private static Map<String, Object> span(SpanData span) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("trace_id", span.getTraceId());
    out.put("span_id", span.getSpanId());
    out.put("parent_span_id", span.getParentSpanContext().isValid() ? span.getParentSpanId() : null);
    out.put("name", span.getName());
    out.put("kind", span.getKind().name());
    out.put("start", span.getStartEpochNanos());
    out.put("end", span.getEndEpochNanos());
    out.put("attributes", attributes(span.getAttributes()));
    List<Object> events = new ArrayList<>();
    for (EventData event : span.getEvents()) {
      events.add(
          Map.of(
              "name", event.getName(),
              "time", event.getEpochNanos(),
              "attributes", attributes(event.getAttributes())));
    }
    out.put("events", events);
    List<Object> links = new ArrayList<>();
    for (LinkData link : span.getLinks()) {
      links.add(
          Map.of(
              "trace_id", link.getSpanContext().getTraceId(),
              "span_id", link.getSpanContext().getSpanId(),
              "attributes", attributes(link.getAttributes())));
    }
    out.put("links", links);
    out.put("status", span.getStatus().getStatusCode().name());
    out.put("status_message", span.getStatus().getDescription());
    var scope = span.getInstrumentationScopeInfo();
    out.put("scope", Arrays.asList(scope.getName(), scope.getVersion()));
    out.put("resource", attributes(span.getResource().getAttributes()));
    return out;
  }

  private static Map<String, Object> log(LogRecordData record) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("time", record.getTimestampEpochNanos());
    out.put("observed", record.getObservedTimestampEpochNanos());
    out.put("severity_number", record.getSeverity().getSeverityNumber());
    out.put("severity_text", record.getSeverityText());
    out.put("event_name", record.getEventName());
    Value<?> body = record.getBodyValue();
    out.put("body", body == null ? null : plain(body));
    out.put("attributes", attributes(record.getAttributes()));
    var context = record.getSpanContext();
    out.put("trace_id", context.isValid() ? context.getTraceId() : null);
    out.put("span_id", context.isValid() ? context.getSpanId() : null);
    out.put("scope", record.getInstrumentationScopeInfo().getName());
    return out;
  }

  private static List<Object> metric(MetricData metric) {
    List<Object> out = new ArrayList<>();
    for (PointData point : metric.getData().getPoints()) {
      Map<String, Object> row = new LinkedHashMap<>();
      row.put("name", metric.getName());
      row.put("type", metric.getType().name());
      row.put("unit", metric.getUnit());
      row.put("scope", metric.getInstrumentationScopeInfo().getName());
      row.put("start", point.getStartEpochNanos());
      row.put("time", point.getEpochNanos());
      row.put("attributes", attributes(point.getAttributes()));
      if (point instanceof LongPointData p) {
        row.put("value", p.getValue());
      } else if (point instanceof DoublePointData p) {
        row.put("value", p.getValue());
      } else if (point instanceof HistogramPointData p) {
        row.put("count", p.getCount());
        row.put("sum", p.getSum());
        row.put("min", p.getMin());
        row.put("max", p.getMax());
        row.put("bounds", p.getBoundaries());
        row.put("counts", p.getCounts());
      } else if (point instanceof ExponentialHistogramPointData p) {
        row.put("count", p.getCount());
        row.put("sum", p.getSum());
        row.put("min", p.getMin());
        row.put("max", p.getMax());
        row.put("scale", p.getScale());
        row.put("zero_count", p.getZeroCount());
        row.put("positive", buckets(p.getPositiveBuckets()));
        row.put("negative", buckets(p.getNegativeBuckets()));
      }
      List<Object> exemplars = new ArrayList<>();
      for (ExemplarData exemplar : point.getExemplars()) {
        Map<String, Object> one = new LinkedHashMap<>();
        one.put("time", exemplar.getEpochNanos());
        one.put("trace_id", exemplar.getSpanContext().getTraceId());
        one.put("span_id", exemplar.getSpanContext().getSpanId());
        one.put(
            "value",
            exemplar instanceof LongExemplarData e
                ? (Object) e.getValue()
                : ((DoubleExemplarData) exemplar).getValue());
        one.put("attributes", attributes(exemplar.getFilteredAttributes()));
        exemplars.add(one);
      }
      row.put("exemplars", exemplars);
      switch (metric.getType()) {
        case LONG_SUM -> {
          row.put("monotonic", metric.getLongSumData().isMonotonic());
          row.put("temporality", metric.getLongSumData().getAggregationTemporality().name());
        }
        case DOUBLE_SUM -> {
          row.put("monotonic", metric.getDoubleSumData().isMonotonic());
          row.put("temporality", metric.getDoubleSumData().getAggregationTemporality().name());
        }
        case HISTOGRAM ->
            row.put("temporality", metric.getHistogramData().getAggregationTemporality().name());
        case EXPONENTIAL_HISTOGRAM ->
            row.put(
                "temporality",
                metric.getExponentialHistogramData().getAggregationTemporality().name());
        default -> {}
      }
      out.add(row);
    }
    return out;
  }

  private static Map<String, Object> buckets(ExponentialHistogramBuckets buckets) {
    return Map.of("offset", buckets.getOffset(), "counts", buckets.getBucketCounts());
  }

  /** Each attribute as {"type": STRING|BOOLEAN|LONG|DOUBLE|..._ARRAY, "value": ...}. */
  private static Map<String, Object> attributes(Attributes attributes) {
    Map<String, Object> out = new LinkedHashMap<>();
    attributes.forEach(
        (key, value) -> {
          AttributeType type = key.getType();
          Object plain = value instanceof Value<?> complex ? plain(complex) : value;
          out.put(key.getKey(), Map.of("type", type.name(), "value", plain));
        });
    return out;
  }

  /** A log body or VALUE attribute as plain JSON: maps and arrays unwrapped, bytes base64. */
  @SuppressWarnings("unchecked")
  private static Object plain(Value<?> value) {
    switch (value.getType()) {
      case KEY_VALUE_LIST -> {
        Map<String, Object> map = new LinkedHashMap<>();
        for (KeyValue entry : (List<KeyValue>) value.getValue()) {
          map.put(entry.getKey(), plain(entry.getValue()));
        }
        return map;
      }
      case ARRAY -> {
        List<Object> list = new ArrayList<>();
        for (Value<?> item : (List<Value<?>>) value.getValue()) {
          list.add(plain(item));
        }
        return list;
      }
      case BYTES -> {
        ByteBuffer bytes = (ByteBuffer) value.getValue();
        byte[] copy = new byte[bytes.remaining()];
        bytes.duplicate().get(copy);
        return Base64.getEncoder().encodeToString(copy);
      }
      default -> {
        return value.getValue();
      }
    }
  }

  // -- a small JSON writer (the SDK ships none): maps, lists, strings, numbers, booleans, null

  private static String json(Object value) {
    StringBuilder out = new StringBuilder();
    write(out, value);
    return out.toString();
  }

  private static void write(StringBuilder out, Object value) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof String s) {
      out.append('"');
      for (char c : s.toCharArray()) {
        switch (c) {
          case '"' -> out.append("\\\"");
          case '\\' -> out.append("\\\\");
          case '\n' -> out.append("\\n");
          default -> {
            if (c < 0x20) {
              out.append(String.format("\\u%04x", (int) c));
            } else {
              out.append(c);
            }
          }
        }
      }
      out.append('"');
    } else if (value instanceof Map<?, ?> map) {
      out.append('{');
      String comma = "";
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        out.append(comma);
        write(out, String.valueOf(entry.getKey()));
        out.append(':');
        write(out, entry.getValue());
        comma = ",";
      }
      out.append('}');
    } else if (value instanceof Collection<?> list) {
      out.append('[');
      String comma = "";
      for (Object item : list) {
        out.append(comma);
        write(out, item);
        comma = ",";
      }
      out.append(']');
    } else if (value instanceof Double d && (d.isNaN() || d.isInfinite())) {
      out.append("null");
    } else {
      out.append(value); // Boolean, Long, Integer, Double
    }
  }
}
