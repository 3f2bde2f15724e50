"""The Delta log stores a Spark session of ours commits through, and the Spark keys that pick
them: facts that the session builder (spark/session.py) applies and the configuration
(config.py) guards, so both read them from here, below either.

Spark's default stores check, then write (a rename on a local disk, a PUT on S3): a commit of
Spark can then replace one of delta-rs's. Ours are put-if-absent (spark/logstore, README:
commit safety), as delta-rs's own commits are.
"""

from __future__ import annotations

# for file:// tables: an atomic create of the commit file
LOGSTORE_CLASS = "io.oteldelta.storage.LocalPutIfAbsentLogStore"
# for s3:// and s3a:// tables: S3 conditional PUT (If-None-Match), like delta-rs's
S3_LOGSTORE_CLASS = "io.oteldelta.storage.S3PutIfAbsentLogStore"
# `[spark.conf]` cannot set these to anything else (config.py refuses it at load); only code's
# own overrides may (tests swap the store to show the race it closes)
COMMIT_SAFETY_CONF = {
    "spark.delta.logStore.file.impl": LOGSTORE_CLASS,
    "spark.delta.logStore.s3.impl": S3_LOGSTORE_CLASS,
    "spark.delta.logStore.s3a.impl": S3_LOGSTORE_CLASS,
}
# Delta's other way to name a store, for every scheme at once: Delta refuses it beside the
# keys above (which we always set), at the first Delta access; refused at load instead
LOGSTORE_CLASS_KEY = "spark.delta.logStore.class"
