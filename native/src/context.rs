//! Resource and scope columns (otel_delta/convert/context.py): each resource and scope is
//! encoded once when entered, then repeated on every row that belongs to it.
use arrow_array::builder::ArrayBuilder;
use arrow_array::ArrayRef;
use arrow_schema::{DataType, Fields};

use crate::anyvalue::{encode, Fallback};
use crate::columns::{field_type, list, strings, struct_fields, Columns, EncodedAttributes, Strings};
use crate::repeat::{put_repeated_attributes, repeated_i64, repeated_strings, AttributeRows};
use crate::otlp::opentelemetry::proto::common::v1::{EntityRef, InstrumentationScope};
use crate::otlp::opentelemetry::proto::resource::v1::Resource;
use crate::wire;

const UNKNOWN_SERVICE: &str = "unknown_service";
const SERVICE_NAME_KEY: &str = "service.name";

/// A resource as its columns hold it on every row.
#[derive(Default)]
struct EncodedResource {
    service_name: String,
    attributes: AttributeRows,
    dropped: i64,
    entity_refs: Vec<EntityRef>,
    schema_url: String,
}

/// A scope as its columns hold it on every row.
#[derive(Default)]
struct EncodedScope {
    name: String,
    version: String,
    attributes: AttributeRows,
    dropped: i64,
    schema_url: String,
}

/// Consecutive rows of one resource and scope (indices into `RowContext`'s lists).
struct Run {
    resource: usize,
    scope: usize,
    rows: usize,
}

/// `service.name` of a resource, `unknown_service` when absent or empty.
fn service_name(resource: &Resource) -> Result<String, Fallback> {
    for kv in &resource.attributes {
        if kv.key == SERVICE_NAME_KEY {
            let (text, _) = encode(kv.value.as_ref())?;
            return Ok(match text {
                Some(t) if !t.is_empty() => t.into_owned(),
                _ => UNKNOWN_SERVICE.to_string(),
            });
        }
    }
    Ok(UNKNOWN_SERVICE.to_string())
}

struct StringLists {
    offsets: Vec<i32>,
    values: Strings,
}

impl StringLists {
    fn new() -> Self {
        Self { offsets: vec![0], values: Strings::default() }
    }

    fn append(&mut self, items: &[String]) {
        for item in items {
            self.values.append_value(item);
        }
        self.offsets.push(self.values.len() as i32);
    }
}

/// The resources and scopes walked, and which rows belong to which: their columns are built
/// at the end, each resource and scope copied onto its rows (crate::repeat).
#[derive(Default)]
pub struct RowContext {
    resources: Vec<EncodedResource>,
    scopes: Vec<EncodedScope>,
    runs: Vec<Run>,
}

impl RowContext {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn enter_resource(&mut self, resource: Option<&Resource>, schema_url: &str) -> Result<(), Fallback> {
        let default = Resource::default();
        let resource = resource.unwrap_or(&default);
        self.resources.push(EncodedResource {
            service_name: service_name(resource)?,
            attributes: EncodedAttributes::new(&resource.attributes)?.map_rows(),
            dropped: resource.dropped_attributes_count as i64,
            entity_refs: resource.entity_refs.clone(),
            schema_url: schema_url.to_string(),
        });
        Ok(())
    }

    pub fn enter_scope(&mut self, scope: Option<&InstrumentationScope>, schema_url: &str) -> Result<(), Fallback> {
        let default = InstrumentationScope::default();
        let scope = scope.unwrap_or(&default);
        self.scopes.push(EncodedScope {
            name: scope.name.clone(),
            version: scope.version.clone(),
            attributes: EncodedAttributes::new(&scope.attributes)?.map_rows(),
            dropped: scope.dropped_attributes_count as i64,
            schema_url: schema_url.to_string(),
        });
        Ok(())
    }

    /// One more row belongs to the resource and scope entered last.
    pub fn add_row(&mut self) {
        let (resource, scope) = (self.resources.len() - 1, self.scopes.len() - 1);
        match self.runs.last_mut() {
            Some(run) if run.resource == resource && run.scope == scope => run.rows += 1,
            _ => self.runs.push(Run { resource, scope, rows: 1 }),
        }
    }

    /// Walks an Export request's bytes in place (crate::wire): each resource and scope is
    /// entered, and `each` is called with every item's bytes (a span, a log record) under them.
    /// Resource, scope and item lists are field 1 of the request, 1/2 of a resource's part and
    /// 1/2 of a scope's part, schema URLs field 3, in every signal.
    pub fn walk_wire<'a>(
        &mut self,
        raw: &'a [u8],
        mut each: impl FnMut(&mut Self, &'a [u8]) -> Result<(), Fallback>,
    ) -> Result<(), Fallback> {
        for resource_part in wire::repeated(raw, 1) {
            let resource_part = resource_part?;
            let (resource, url) = wire::header(resource_part, 1, 2, 3)?;
            self.enter_resource(wire::decoded::<Resource>(resource)?.as_ref(), url)?;
            for scope_part in wire::repeated(resource_part, 2) {
                let scope_part = scope_part?;
                let (scope, url) = wire::header(scope_part, 1, 2, 3)?;
                self.enter_scope(wire::decoded::<InstrumentationScope>(scope)?.as_ref(), url)?;
                for item in wire::repeated(scope_part, 2) {
                    each(self, item?)?;
                }
            }
        }
        Ok(())
    }

    /// The `service_name`, `resource_*` and `scope_*` columns, typed from the table `fields`;
    /// an error starting with TOO_LARGE if their copies would take more than the request may
    /// expand to (`check_expansion`).
    pub fn finish(self, fields: &Fields) -> Result<Columns, String> {
        self.check_expansion()?;
        let resources = || self.runs.iter().map(|run| (&self.resources[run.resource], run.rows));
        let scopes = || self.runs.iter().map(|run| (&self.scopes[run.scope], run.rows));
        let mut columns = Columns::default();
        let column = |name: &str| field_type(fields, name);
        let service_names = resources().map(|(r, n)| (Some(r.service_name.as_str()), n));
        columns.put("service_name", repeated_strings(column("service_name"), service_names));
        let names = ["resource_attributes", "resource_attribute_types"];
        put_repeated_attributes(&mut columns, fields, names, resources().map(|(r, n)| (&r.attributes, n)));
        columns.put("resource_dropped_attributes_count", repeated_i64(resources().map(|(r, n)| (r.dropped, n))));
        columns.put("resource_entity_refs", entity_refs(column("resource_entity_refs"), resources())?);
        let schema_urls = resources().map(|(r, n)| (Some(r.schema_url.as_str()), n));
        columns.put("resource_schema_url", repeated_strings(column("resource_schema_url"), schema_urls));
        let scope_names = scopes().map(|(s, n)| (Some(s.name.as_str()), n));
        columns.put("scope_name", repeated_strings(column("scope_name"), scope_names));
        let versions = scopes().map(|(s, n)| (Some(s.version.as_str()), n));
        columns.put("scope_version", repeated_strings(column("scope_version"), versions));
        let names = ["scope_attributes", "scope_attribute_types"];
        put_repeated_attributes(&mut columns, fields, names, scopes().map(|(s, n)| (&s.attributes, n)));
        columns.put("scope_dropped_attributes_count", repeated_i64(scopes().map(|(s, n)| (s.dropped, n))));
        let scope_urls = scopes().map(|(s, n)| (Some(s.schema_url.as_str()), n));
        columns.put("scope_schema_url", repeated_strings(column("scope_schema_url"), scope_urls));
        Ok(columns)
    }
}

/// What an error of a request too large to convert starts with (the Python side answers it
/// as RequestTooLargeError).
pub const TOO_LARGE: &str = "too large to convert";
/// About what one attribute of a repeated resource or scope costs per row once built (the
/// Python converter's strings: 2,000 attributes over 40,000 spans took 2.6 GB; dictionary
/// indices here take less).
const BYTES_PER_REPEATED_ENTRY: usize = 32;
/// The copies may grow to this many times the request's bytes, or to MIN_REPEATED_BYTES,
/// whichever is more; realistic requests expand 5 to 25 times in all, the copies a
/// fraction of it (a metrics request of 250,000 points under 40 attributes is 7 MB).
const MAX_EXPANSION: usize = 128;
const MIN_REPEATED_BYTES: usize = 256 << 20;

impl RowContext {
    /// Refuses, before they are built, repeated maps larger than the request may expand to:
    /// a resource's attributes are copied onto every row under it, and 2.4 MB of protobuf
    /// (2,000 attributes, 40,000 spans) took 2.6 GB, past a container's memory.
    fn check_expansion(&self) -> Result<(), String> {
        let entries: usize = self
            .runs
            .iter()
            .map(|run| {
                let per_row = self.resources[run.resource].attributes.entries()
                    + self.scopes[run.scope].attributes.entries();
                per_row.saturating_mul(run.rows)
            })
            .fold(0usize, usize::saturating_add);
        let bytes = entries.saturating_mul(BYTES_PER_REPEATED_ENTRY);
        let allowed = MIN_REPEATED_BYTES.max(crate::columns::request_bytes().saturating_mul(MAX_EXPANSION));
        if bytes > allowed {
            return Err(format!(
                "{TOO_LARGE}: its resources' and scopes' attributes, copied onto each of their \
                 {} items, would take about {bytes} bytes, over {allowed}",
                self.runs.iter().map(|run| run.rows).sum::<usize>()
            ));
        }
        Ok(())
    }
}

/// The `resource_entity_refs` column (LIST<STRUCT>) of `refs_type`: most resources have none.
fn entity_refs<'a>(
    refs_type: &DataType,
    resources: impl Iterator<Item = (&'a EncodedResource, usize)>,
) -> Result<ArrayRef, String> {
    let mut offsets = vec![0i32];
    let mut schema_url = Strings::default();
    let mut type_ = Strings::default();
    let mut id_keys = StringLists::new();
    let mut description_keys = StringLists::new();
    for (resource, n) in resources {
        for _ in 0..n {
            for entity in &resource.entity_refs {
                schema_url.append_value(&entity.schema_url);
                type_.append_value(&entity.r#type);
                id_keys.append(&entity.id_keys);
                description_keys.append(&entity.description_keys);
            }
            offsets.push(type_.len() as i32);
        }
    }
    let ref_fields = struct_fields(refs_type);
    let mut entity = Columns::default();
    entity.put("schema_url", strings(schema_url));
    entity.put("type", strings(type_));
    for (name, lists) in [("id_keys", id_keys), ("description_keys", description_keys)] {
        let values = strings(lists.values);
        entity.put(name, list(field_type(ref_fields, name), lists.offsets, values));
    }
    let entity = std::sync::Arc::new(entity.into_struct(ref_fields)?);
    Ok(list(refs_type, offsets, entity))
}
