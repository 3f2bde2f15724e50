"""Resource, scope and other per-group columns: built once per group, then expanded to rows.

Every span of a ResourceSpans shares its resource; encoding the resource per row would cost
O(rows x attributes). Instead each group is encoded once and `take` expands it by row index.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import Message
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_delta.convert.anyvalue import encode
from otel_delta.convert.columns import AttributeColumns, KeyRepeats, list_array, struct_array
from otel_delta.errors import RequestTooLargeError
from otel_delta.tables.schemas import ENTITY_REF

UNKNOWN_SERVICE = "unknown_service"
# How far a request's copies of its resources and scopes may grow, the native converter's
# bound (native/src/context.rs, check_expansion): about this many bytes per attribute per row,
# at most MAX_EXPANSION times the request's bytes or MIN_REPEATED_BYTES, whichever is more
# (realistic requests expand 5 to 25 times in all, the copies a fraction of it). 2,000
# resource attributes over 40,000 spans (2.4 MB of protobuf) took 2.6 GB here.
BYTES_PER_REPEATED_ENTRY = 32
MAX_EXPANSION = 128
MIN_REPEATED_BYTES = 256 << 20
SERVICE_NAME_KEY = "service.name"


def service_name(resource: Resource) -> str:
    """`service.name` of a resource (the partition value); `unknown_service` when absent. The
    last one, if a request repeats the key: the one the resource's attributes keep."""
    for kv in reversed(resource.attributes):
        if kv.key == SERVICE_NAME_KEY:
            text, _ = encode(kv.value)
            return text or UNKNOWN_SERVICE
    return UNKNOWN_SERVICE


class ResourceGroups:
    """Unique resources of one request and the resource index of every row."""

    def __init__(self, repeats: KeyRepeats) -> None:
        self.service_names: list[str] = []
        self.attributes = AttributeColumns(repeats)
        self.dropped: list[int] = []
        self.schema_urls: list[str] = []
        self.entity_offsets: list[int] = [0]
        self.entity_refs: dict[str, list] = {f.name: [] for f in ENTITY_REF}
        self.entries: list[int] = []  # attributes each copy holds

    def add(self, resource: Resource, schema_url: str) -> int:
        self.entries.append(len(resource.attributes))
        self.service_names.append(service_name(resource))
        repeated = self.attributes.append(resource.attributes)
        self.dropped.append(resource.dropped_attributes_count + repeated)
        self.schema_urls.append(schema_url)
        for ref in resource.entity_refs:
            self.entity_refs["schema_url"].append(ref.schema_url)
            self.entity_refs["type"].append(ref.type)
            self.entity_refs["id_keys"].append(list(ref.id_keys))
            self.entity_refs["description_keys"].append(list(ref.description_keys))
        self.entity_offsets.append(len(self.entity_refs["type"]))
        return len(self.dropped) - 1

    def columns(self, row_index: pa.Array) -> dict[str, pa.Array]:
        attrs, types = self.attributes.arrays()
        refs = struct_array(
            {
                name: pa.array(vals, ENTITY_REF.field(name).type)
                for name, vals in self.entity_refs.items()
            },
            ENTITY_REF,
        )
        unique = {
            "service_name": pa.array(self.service_names, pa.string()),
            "resource_attributes": attrs,
            "resource_attribute_types": types,
            "resource_dropped_attributes_count": pa.array(self.dropped, pa.int64()),
            "resource_entity_refs": list_array(self.entity_offsets, refs),
            "resource_schema_url": pa.array(self.schema_urls, pa.string()),
        }
        return {name: pc.take(arr, row_index) for name, arr in unique.items()}


class ScopeGroups:
    """Unique instrumentation scopes of one request and the scope index of every row."""

    def __init__(self, repeats: KeyRepeats) -> None:
        self.names: list[str] = []
        self.versions: list[str] = []
        self.attributes = AttributeColumns(repeats)
        self.dropped: list[int] = []
        self.schema_urls: list[str] = []
        self.entries: list[int] = []  # attributes each copy holds

    def add(self, scope: InstrumentationScope, schema_url: str) -> int:
        self.entries.append(len(scope.attributes))
        self.names.append(scope.name)
        self.versions.append(scope.version)
        repeated = self.attributes.append(scope.attributes)
        self.dropped.append(scope.dropped_attributes_count + repeated)
        self.schema_urls.append(schema_url)
        return len(self.names) - 1

    def columns(self, row_index: pa.Array) -> dict[str, pa.Array]:
        attrs, types = self.attributes.arrays()
        unique = {
            "scope_name": pa.array(self.names, pa.string()),
            "scope_version": pa.array(self.versions, pa.string()),
            "scope_attributes": attrs,
            "scope_attribute_types": types,
            "scope_dropped_attributes_count": pa.array(self.dropped, pa.int64()),
            "scope_schema_url": pa.array(self.schema_urls, pa.string()),
        }
        return {name: pc.take(arr, row_index) for name, arr in unique.items()}


class RowContext:
    """The resource and scope being walked, shared by every table a request feeds."""

    def __init__(self, request: Message | None = None) -> None:
        self.request = request  # its size bounds the copies (`check_expansion`)
        self.repeats = KeyRepeats()  # of every attribute list of the request
        self.resources = ResourceGroups(self.repeats)
        self.scopes = ScopeGroups(self.repeats)
        self.resource = -1
        self.scope = -1

    def enter_resource(self, resource: Resource, schema_url: str) -> None:
        self.resource = self.resources.add(resource, schema_url)

    def enter_scope(self, scope: InstrumentationScope, schema_url: str) -> None:
        self.scope = self.scopes.add(scope, schema_url)

    def new_rows(self) -> RowIndex:
        return RowIndex(self)

    def check_expansion(self, entries: int, rows: int) -> None:
        """RequestTooLargeError before `entries` attributes of copies are built, if they
        would take more than the request may expand to."""
        estimated = entries * BYTES_PER_REPEATED_ENTRY
        if estimated <= MIN_REPEATED_BYTES:
            return
        request_bytes = self.request.ByteSize() if self.request is not None else 0
        allowed = max(MIN_REPEATED_BYTES, request_bytes * MAX_EXPANSION)
        if estimated > allowed:
            raise RequestTooLargeError(
                "request too large to convert: its resources' and scopes' attributes, copied "
                f"onto each of their {rows} items, would take about {estimated} bytes, over "
                f"{allowed}; send smaller requests"
            )


class RowIndex:
    """Which resource and scope each row of one table belongs to."""

    def __init__(self, ctx: RowContext) -> None:
        self.ctx = ctx
        self.row_resource: list[int] = []
        self.row_scope: list[int] = []

    def add_row(self) -> None:
        self.row_resource.append(self.ctx.resource)
        self.row_scope.append(self.ctx.scope)

    def __len__(self) -> int:
        return len(self.row_resource)

    def columns(self) -> dict[str, pa.Array]:
        resource_index = pa.array(self.row_resource, pa.int32())
        scope_index = pa.array(self.row_scope, pa.int32())
        entries = sum(
            pc.sum(pc.take(pa.array(groups.entries, pa.int64()), index)).as_py() or 0
            for groups, index in (
                (self.ctx.resources, resource_index),
                (self.ctx.scopes, scope_index),
            )
        )
        self.ctx.check_expansion(entries, len(self))
        return {
            **self.ctx.resources.columns(resource_index),
            **self.ctx.scopes.columns(scope_index),
        }
