//! One file's bytes in a sink's format: Parquet (zstd, the Iceberg sinks' writer
//! properties), JSON lines, or CSV with a header row.
//!
//! CSV quotes a field (RFC 4180: in `"`, a `"` doubled) when it holds a `,`, `"`, CR or LF;
//! a null is an empty field; a nested value (struct, list, map) is written as Arrow displays
//! it (`{a: 1}`, `[1, 2]`), since CSV has no nesting.

use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::config::connectors::OutputFormat;

/// The file extension of `format`: `parquet`, `jsonl` or `csv`.
pub fn extension(format: OutputFormat) -> &'static str {
    match format {
        OutputFormat::Parquet => "parquet",
        OutputFormat::Jsonl => "jsonl",
        OutputFormat::Csv => "csv",
    }
}

/// `batch` as one whole file in `format`.
///
/// # Errors
///
/// [`ArrowError`] when a value cannot be encoded (the Parquet or JSON writer refuses it).
pub fn encode(batch: &RecordBatch, format: OutputFormat) -> Result<Vec<u8>, ArrowError> {
    let external = |e: parquet::errors::ParquetError| ArrowError::ExternalError(Box::new(e));
    match format {
        OutputFormat::Jsonl => {
            let mut writer = arrow::json::LineDelimitedWriter::new(Vec::new());
            writer.write(batch)?;
            writer.finish()?;
            Ok(writer.into_inner())
        }
        OutputFormat::Parquet => {
            let props = crate::sinks::iceberg::parquet_properties()
                .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
            let mut out = Vec::new();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
                    .map_err(external)?;
            writer.write(batch).map_err(external)?;
            writer.close().map_err(external)?;
            Ok(out)
        }
        OutputFormat::Csv => csv(batch),
    }
}

/// `batch` as CSV with a header row (see the module docs).
fn csv(batch: &RecordBatch) -> Result<Vec<u8>, ArrowError> {
    let mut out = String::new();
    let schema = batch.schema();
    let header: Vec<String> = schema.fields().iter().map(|f| quoted(f.name())).collect();
    out.push_str(&header.join(","));
    out.push('\n');
    let options = FormatOptions::default().with_null("");
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    for row in 0..batch.num_rows() {
        for (i, f) in formatters.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&quoted(&f.value(row).to_string()));
        }
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// A CSV field: as it is, or quoted when it holds a separator, quote or line break.
fn quoted(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn csv_quotes_separators_and_writes_nulls_empty() {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("note, text", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("say \"hi\",\nbye"), None])),
            ],
        )
        .unwrap();
        let text = String::from_utf8(encode(&batch, OutputFormat::Csv).unwrap()).unwrap();
        assert_eq!(text, "id,\"note, text\"\n1,\"say \"\"hi\"\",\nbye\"\n,\n");
    }
}
