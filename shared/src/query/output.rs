//! [`QueryOutput`]: a statement's result, and its text forms.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::json::writer::{JsonArray, WriterBuilder};
use arrow::util::pretty::pretty_format_batches_with_schema;
use serde_json::{Map, Value};

/// The result of one statement: its schema and its rows.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    /// The result's columns.
    pub schema: SchemaRef,
    /// The result's rows.
    pub batches: Vec<RecordBatch>,
}

impl QueryOutput {
    /// How many rows the result has.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    /// The result as an aligned text table with a header, for people. A result with no rows
    /// still shows its header.
    pub fn to_table(&self) -> String {
        match pretty_format_batches_with_schema(self.schema.clone(), &self.batches) {
            Ok(table) => table.to_string(),
            Err(error) => format!("(could not format the result: {error})"),
        }
    }

    /// The result as one line of JSON: `{"header":["col",...],"rows":[[value,...],...]}`.
    /// Numbers are JSON numbers, nulls `null`, dates and timestamps ISO 8601 strings, structs
    /// objects and lists arrays.
    pub fn to_plain_json(&self) -> String {
        let header: Vec<Value> = self
            .schema
            .fields()
            .iter()
            .map(|field| Value::String(field.name().clone()))
            .collect();
        let rows = match self.json_rows() {
            Ok(rows) => rows,
            Err(error) => {
                return serde_json::json!({ "header": header, "error": error }).to_string();
            }
        };
        serde_json::json!({ "header": header, "rows": rows }).to_string()
    }

    /// Each row as an array of JSON values, in column order.
    fn json_rows(&self) -> Result<Vec<Value>, String> {
        // Columns are renamed c0, c1, ... so that duplicate names (`select a, a`) stay apart.
        let renamed = Arc::new(Schema::new(
            self.schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, field)| Field::new(format!("c{i}"), field.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let columns = self.schema.fields().len();
        let mut rows = Vec::with_capacity(self.rows());
        for batch in &self.batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let batch = RecordBatch::try_new(renamed.clone(), batch.columns().to_vec())
                .map_err(|error| error.to_string())?;
            let mut writer = WriterBuilder::new()
                .with_explicit_nulls(true)
                .build::<_, JsonArray>(Vec::new());
            writer.write(&batch).map_err(|error| error.to_string())?;
            writer.finish().map_err(|error| error.to_string())?;
            let objects: Vec<Map<String, Value>> =
                serde_json::from_slice(&writer.into_inner()).map_err(|error| error.to_string())?;
            for mut object in objects {
                rows.push(Value::Array(
                    (0..columns)
                        .map(|i| object.remove(&format!("c{i}")).unwrap_or(Value::Null))
                        .collect(),
                ));
            }
        }
        Ok(rows)
    }
}

/// A statement's result read batch by batch ([`super::QueryEngine::sql_stream`]): an Arrow
/// [`RecordBatchReader`](arrow::record_batch::RecordBatchReader), so it can be exported
/// through the Arrow C stream interface.
pub struct QueryStream {
    runtime: Arc<tokio::runtime::Runtime>,
    schema: SchemaRef,
    stream: datafusion::physical_plan::SendableRecordBatchStream,
    /// The engine's tables, to name them in errors.
    tables: Vec<String>,
}

impl std::fmt::Debug for QueryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryStream")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl QueryStream {
    pub(super) fn new(
        runtime: Arc<tokio::runtime::Runtime>,
        stream: datafusion::physical_plan::SendableRecordBatchStream,
        tables: Vec<String>,
    ) -> QueryStream {
        QueryStream {
            runtime,
            schema: stream.schema(),
            stream,
            tables,
        }
    }
}

impl Iterator for QueryStream {
    type Item = Result<RecordBatch, arrow::error::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        use futures::StreamExt as _;
        let next = self.runtime.block_on(self.stream.next())?;
        Some(next.map_err(|error| {
            arrow::error::ArrowError::ExternalError(Box::new(super::QueryError::from_datafusion(
                error,
                &self.tables,
            )))
        }))
    }
}

impl arrow::record_batch::RecordBatchReader for QueryStream {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
