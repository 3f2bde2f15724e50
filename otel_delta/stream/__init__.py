"""`otel-delta stream`: Kafka → Spark Structured Streaming → the Delta tables, exactly once.

`convert` turns the Kafka messages of one micro-batch into Arrow IPC blobs per table inside the
executors (the receiver's converters, as the Spark backfill does); `job` builds the query and
commits each micro-batch with one Delta transaction per table (`txnAppId`, `txnVersion`).
"""
