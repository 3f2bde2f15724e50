"""`otel-delta stream`: Kafka → Spark Structured Streaming → the Delta tables, exactly once.

`convert` turns the Kafka messages of one micro-batch into Parquet files of the tables inside
the executors (the receiver's converters, the tables' layout); `job` builds the query and
commits each micro-batch's files with one delta-rs commit per table carrying the batch's
transaction; `progress` reports lag and throughput.
"""
