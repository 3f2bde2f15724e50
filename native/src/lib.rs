//! Native OTLP → Arrow conversion for otel-delta: the same tables, rejections and messages as
//! the Python reference converter (otel_delta/convert), without the per-value Python cost.
use std::sync::{Arc, Mutex};

use arrow_array::{Array, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_data::ArrayData;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{Schema, SchemaRef};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};

// Conversion allocates many small strings per span; mimalloc makes that markedly cheaper.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod anyvalue;
mod columns;
mod context;
mod logs;
mod metrics;
mod pyrepr;
mod repeat;
mod spans;
mod utf8;
mod wire;

#[allow(clippy::all, dead_code)]
mod otlp {
    include!(concat!(env!("OUT_DIR"), "/otlp.rs"));
}

/// What a converter made of one request.
pub enum Outcome {
    /// The tables that got rows (by table name) and the rejected items.
    Converted(Vec<(&'static str, StructArray)>, columns::Rejections),
    /// Not converted natively: the caller runs the Python converter on the same bytes.
    Fallback,
}

/// One converted table, handed to pyarrow through the Arrow PyCapsule interface.
#[pyclass(frozen)]
struct ArrowBatch {
    exported: Mutex<Option<(FFI_ArrowSchema, FFI_ArrowArray)>>,
}

#[pymethods]
impl ArrowBatch {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema;
        let taken = self.exported.lock().expect("batch lock").take();
        let (schema, array) =
            taken.ok_or_else(|| PyRuntimeError::new_err("batch already exported"))?;
        let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        Ok((schema, array))
    }
}

fn import_schema(schema: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    let capsule = schema.call_method0("__arrow_c_schema__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(c"arrow_schema"))?;
    // SAFETY: an "arrow_schema" capsule holds an FFI_ArrowSchema owned by the capsule; we only read it.
    let ffi = unsafe { &*(pointer.as_ptr() as *const FFI_ArrowSchema) };
    let schema = Schema::try_from(ffi).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(Arc::new(schema))
}

type Converted = Option<(Vec<(String, ArrowBatch, usize)>, u64, Vec<String>)>;

/// The schemas of a signal's tables, by table name, as Python hands them over.
pub type Schemas = [(String, SchemaRef)];

pub fn schema_of<'a>(schemas: &'a Schemas, name: &str) -> Result<&'a SchemaRef, String> {
    schemas
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s)
        .ok_or_else(|| format!("no schema handed over for table {name}"))
}

type ConvertFn = fn(&[u8], &Schemas, usize) -> Result<Outcome, String>;

/// Converts one signal's Export request bytes into its tables.
///
/// `Converter(signal, schemas, max_messages)`: signal "traces" (table `spans`), "logs" (`logs`)
/// or "metrics" (the five `metrics_*` tables); `schemas` lists `(table name, schema)` of the
/// signal's tables. `convert(raw)` returns None when the request must go to the Python
/// converter (bytes that do not decode, attribute values nested deeper than the native limit,
/// a message only Python words), else `([(table name, batch, bytes allocated)], rejected count,
/// first distinct rejection messages)` with a batch for each table that got rows. The bytes
/// allocated are what mimalloc holds for the batch's buffers (`allocated_bytes`), more than
/// their lengths (all pyarrow sees): the buffer's memory bound counts them.
#[pyclass(frozen)]
struct Converter {
    convert: ConvertFn,
    schemas: Vec<(String, SchemaRef)>,
    max_messages: usize,
}

#[pymethods]
impl Converter {
    #[new]
    fn new(signal: &str, schemas: Vec<(String, Bound<'_, PyAny>)>, max_messages: usize) -> PyResult<Self> {
        let convert: ConvertFn = match signal {
            "traces" => spans::convert,
            "logs" => logs::convert,
            "metrics" => metrics::convert,
            other => return Err(PyValueError::new_err(format!("no native converter for {other}"))),
        };
        let schemas = schemas
            .into_iter()
            .map(|(name, schema)| Ok((name, import_schema(&schema)?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Self { convert, schemas, max_messages })
    }

    fn convert(&self, py: Python<'_>, raw: &Bound<'_, PyBytes>) -> PyResult<Converted> {
        let bytes = raw.as_bytes();
        let outcome = py
            .detach(|| (self.convert)(bytes, &self.schemas, self.max_messages))
            .map_err(PyRuntimeError::new_err)?;
        match outcome {
            Outcome::Fallback => Ok(None),
            Outcome::Converted(tables, rejected) => {
                let mut batches = Vec::with_capacity(tables.len());
                for (name, table) in tables {
                    let schema = FFI_ArrowSchema::try_from(table.data_type())
                        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                    let data = table.to_data();
                    let allocated = allocated_bytes(&data);
                    let array = FFI_ArrowArray::new(&data);
                    let batch = ArrowBatch { exported: Mutex::new(Some((schema, array))) };
                    batches.push((name.to_string(), batch, allocated));
                }
                Ok(Some((batches, rejected.count, rejected.messages)))
            }
        }
    }
}

/// What mimalloc holds for the buffers of `data` (children included): each buffer's capacity
/// rounded up to the size class mimalloc serves it from, the memory its rows keep until they
/// are committed. Size classes step by an eighth, so capacities alone undercounted by a few
/// percent of the buffer's memory bound (`mi_good_size` looks at sizes only, no pointer).
fn allocated_bytes(data: &ArrayData) -> usize {
    let reserved = |capacity: usize| {
        // SAFETY: mi_good_size is a pure function of its argument
        if capacity == 0 { 0 } else { unsafe { libmimalloc_sys::mi_good_size(capacity) } }
    };
    let own: usize = data.buffers().iter().map(|b| reserved(b.capacity())).sum();
    let nulls = data.nulls().map_or(0, |n| reserved(n.buffer().capacity()));
    own + nulls + data.child_data().iter().map(allocated_bytes).sum::<usize>()
}

#[pymodule]
fn otel_delta_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Converter>()?;
    m.add_class::<ArrowBatch>()?;
    m.add_class::<utf8::Utf8Repair>()?;
    Ok(())
}
