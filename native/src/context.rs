//! Resource and scope columns (otel_delta/convert/context.py): each resource and scope is
//! encoded once when entered, then repeated on every row that belongs to it.
use arrow_array::builder::ArrayBuilder;
use arrow_schema::Fields;

use crate::anyvalue::{encode, Fallback};
use crate::columns::{field_type, int64, list, strings, struct_fields, AttributeColumns, Columns, EncodedAttributes, Strings};
use crate::otlp::opentelemetry::proto::common::v1::{EntityRef, InstrumentationScope};
use crate::otlp::opentelemetry::proto::resource::v1::Resource;
use crate::wire;

const UNKNOWN_SERVICE: &str = "unknown_service";
const SERVICE_NAME_KEY: &str = "service.name";

#[derive(Default)]
struct EncodedResource {
    service_name: String,
    attributes: EncodedAttributes,
    dropped: i64,
    entity_refs: Vec<EntityRef>,
    schema_url: String,
}

#[derive(Default)]
struct EncodedScope {
    name: String,
    version: String,
    attributes: EncodedAttributes,
    dropped: i64,
    schema_url: String,
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

/// The resource and scope being walked, and their columns for every row so far.
pub struct RowContext {
    resource: EncodedResource,
    scope: EncodedScope,
    service_name: Strings,
    resource_attributes: AttributeColumns,
    resource_dropped: Vec<i64>,
    entity_offsets: Vec<i32>,
    entity_schema_url: Strings,
    entity_type: Strings,
    entity_id_keys: StringLists,
    entity_description_keys: StringLists,
    resource_schema_url: Strings,
    scope_name: Strings,
    scope_version: Strings,
    scope_attributes: AttributeColumns,
    scope_dropped: Vec<i64>,
    scope_schema_url: Strings,
}

impl RowContext {
    /// The context of the table `name`'s rows, its builders `Strings::sized` as that table's
    /// parts 0-4 and 10-17 were: these columns repeat the resource and scope on every row, so
    /// they are among the largest. (The only constructor: a default one would allocate
    /// builders that sizing then replaces.)
    pub fn sized(name: &'static str) -> Self {
        Self {
            resource: EncodedResource::default(),
            scope: EncodedScope::default(),
            service_name: Strings::sized(name, 0),
            resource_attributes: AttributeColumns::sized(name, 10),
            resource_dropped: Vec::new(),
            entity_offsets: vec![0],
            entity_schema_url: Strings::default(),
            entity_type: Strings::default(),
            entity_id_keys: StringLists::new(),
            entity_description_keys: StringLists::new(),
            resource_schema_url: Strings::sized(name, 1),
            scope_name: Strings::sized(name, 2),
            scope_version: Strings::sized(name, 3),
            scope_attributes: AttributeColumns::sized(name, 14),
            scope_dropped: Vec::new(),
            scope_schema_url: Strings::sized(name, 4),
        }
    }

    pub fn enter_resource(&mut self, resource: Option<&Resource>, schema_url: &str) -> Result<(), Fallback> {
        let default = Resource::default();
        let resource = resource.unwrap_or(&default);
        self.resource = EncodedResource {
            service_name: service_name(resource)?,
            attributes: EncodedAttributes::new(&resource.attributes)?,
            dropped: resource.dropped_attributes_count as i64,
            entity_refs: resource.entity_refs.clone(),
            schema_url: schema_url.to_string(),
        };
        Ok(())
    }

    pub fn enter_scope(&mut self, scope: Option<&InstrumentationScope>, schema_url: &str) -> Result<(), Fallback> {
        let default = InstrumentationScope::default();
        let scope = scope.unwrap_or(&default);
        self.scope = EncodedScope {
            name: scope.name.clone(),
            version: scope.version.clone(),
            attributes: EncodedAttributes::new(&scope.attributes)?,
            dropped: scope.dropped_attributes_count as i64,
            schema_url: schema_url.to_string(),
        };
        Ok(())
    }

    /// One more row belongs to the current resource and scope.
    pub fn add_row(&mut self) {
        let r = &self.resource;
        self.service_name.append_value(&r.service_name);
        self.resource_attributes.append_encoded(&r.attributes);
        self.resource_dropped.push(r.dropped);
        for entity in &r.entity_refs {
            self.entity_schema_url.append_value(&entity.schema_url);
            self.entity_type.append_value(&entity.r#type);
            self.entity_id_keys.append(&entity.id_keys);
            self.entity_description_keys.append(&entity.description_keys);
        }
        self.entity_offsets.push(self.entity_type.len() as i32);
        self.resource_schema_url.append_value(&r.schema_url);
        let s = &self.scope;
        self.scope_name.append_value(&s.name);
        self.scope_version.append_value(&s.version);
        self.scope_attributes.append_encoded(&s.attributes);
        self.scope_dropped.push(s.dropped);
        self.scope_schema_url.append_value(&s.schema_url);
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

    /// The `service_name`, `resource_*` and `scope_*` columns, typed from the table `fields`.
    pub fn finish(self, fields: &Fields) -> Result<Columns, String> {
        let mut columns = Columns::default();
        columns.put("service_name", strings(self.service_name));
        self.resource_attributes.finish(
            fields,
            ["resource_attributes", "resource_attribute_types"],
            &mut columns,
        );
        columns.put("resource_dropped_attributes_count", int64(self.resource_dropped));
        let refs_type = field_type(fields, "resource_entity_refs");
        let ref_fields = struct_fields(refs_type);
        let mut entity = Columns::default();
        entity.put("schema_url", strings(self.entity_schema_url));
        entity.put("type", strings(self.entity_type));
        for (name, lists) in [
            ("id_keys", self.entity_id_keys),
            ("description_keys", self.entity_description_keys),
        ] {
            let values = strings(lists.values);
            entity.put(name, list(field_type(ref_fields, name), lists.offsets, values));
        }
        let entity = std::sync::Arc::new(entity.into_struct(ref_fields)?);
        columns.put("resource_entity_refs", list(refs_type, self.entity_offsets, entity));
        columns.put("resource_schema_url", strings(self.resource_schema_url));
        columns.put("scope_name", strings(self.scope_name));
        columns.put("scope_version", strings(self.scope_version));
        self.scope_attributes.finish(fields, ["scope_attributes", "scope_attribute_types"], &mut columns);
        columns.put("scope_dropped_attributes_count", int64(self.scope_dropped));
        columns.put("scope_schema_url", strings(self.scope_schema_url));
        Ok(columns)
    }
}
