"""Print the FileDescriptorSet of the OTLP messages the Python converter uses (for build.rs).

The native converter is generated from the very descriptors compiled into the installed
`opentelemetry-proto` Python package, so both decoders always agree on every field.
"""

import sys

from google.protobuf import descriptor_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def main() -> None:
    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        proto = out.file.add()
        fd.CopyToProto(proto)

    for module in (trace_service_pb2, logs_service_pb2, metrics_service_pb2):
        add(module.DESCRIPTOR)
    sys.stdout.buffer.write(out.SerializeToString())


if __name__ == "__main__":
    main()
