//! Where a data file goes: `{data location}/{name=value}/.../{file name}`, with each
//! partition directory escaped and bounded by the naming policy
//! ([`crate::schema::naming::partition_segment`]).
//!
//! iceberg-rust's `DefaultLocationGenerator` joins `partition_to_path`, which writes the
//! values as they are: a value `../../x` would put Parquet outside the table, `a/b` would
//! nest directories, a NUL fails every write and a 300-byte value is longer than a file name
//! may be. Here every partition field is one directory, `name=value` percent-escaped as Hive
//! and Spark escape partition paths, at most 128 bytes. The directory names are only for
//! people: Iceberg records each file's partition values in its manifest.

use std::sync::{Arc, Mutex, PoisonError};

use iceberg::spec::{Literal, PartitionKey, PartitionSpec, Struct, TableMetadata};
use iceberg::writer::file_writer::location_generator::LocationGenerator;

use crate::schema::naming::partition_segment;

/// Table property naming where data files go (as in iceberg-rust and Java Iceberg).
const WRITE_DATA_LOCATION: &str = "write.data.path";
/// The older name of [`WRITE_DATA_LOCATION`].
const WRITE_FOLDER_STORAGE_LOCATION: &str = "write.folder-storage.path";

/// A [`LocationGenerator`] that escapes partition directories (see the module docs).
#[derive(Debug, Clone)]
pub struct LakeLocationGenerator {
    data_location: String,
    /// Where every location handed out is noted, when the writer's caller asked for it.
    started: Option<Started>,
}

/// The data files a delivery's writers started (every location they were handed, whether
/// the file got written, half written or never created). A delivery that fails before its
/// commit deletes them: nothing references them, and left behind (until cleanup's orphan
/// window) they fill the disk that made the write fail, so every retry fails too.
#[derive(Debug, Clone, Default)]
pub struct Started(Arc<Mutex<Vec<String>>>);

impl Started {
    fn note(&self, location: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(location.to_owned());
    }

    /// The locations noted so far, emptying the list.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl LakeLocationGenerator {
    /// Data files under the table's `write.data.path`, or `{location}/data`.
    pub fn new(metadata: &TableMetadata) -> Self {
        let props = metadata.properties();
        let data_location = props
            .get(WRITE_DATA_LOCATION)
            .or_else(|| props.get(WRITE_FOLDER_STORAGE_LOCATION))
            .cloned()
            .unwrap_or_else(|| format!("{}/data", metadata.location()));
        LakeLocationGenerator {
            data_location: data_location.trim_end_matches('/').to_owned(),
            started: None,
        }
    }

    /// The same generator, noting every location it hands out in `started`.
    pub fn noting(mut self, started: &Started) -> Self {
        self.started = Some(started.clone());
        self
    }
}

impl LocationGenerator for LakeLocationGenerator {
    fn generate_location(&self, partition_key: Option<&PartitionKey>, file_name: &str) -> String {
        let location = match partition_key {
            Some(key) if !key.spec().is_unpartitioned() => format!(
                "{}/{}/{file_name}",
                self.data_location,
                partition_path(key.spec(), key.schema(), key.data())
            ),
            _ => format!("{}/{file_name}", self.data_location),
        };
        if let Some(started) = &self.started {
            started.note(&location);
        }
        location
    }
}

/// The escaped directories of the partition `data` of `spec`: `name=value/...`. The same
/// partition always gives the same path; distinct partitions may share one (a cut value),
/// which is harmless since file names are unique.
pub fn partition_path(
    spec: &PartitionSpec,
    schema: &iceberg::spec::SchemaRef,
    data: &Struct,
) -> String {
    let types = spec.partition_type(schema).ok();
    spec.fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let value = data.fields().get(i).and_then(Option::as_ref);
            let text = match (value, types.as_ref().and_then(|t| t.fields().get(i))) {
                (None, _) => None,
                (Some(value), Some(result)) => Some(
                    field
                        .transform
                        .to_human_string(&result.field_type, Some(value)),
                ),
                // The spec no longer binds to the schema: name the value by its literal.
                (Some(value), None) => Some(literal_text(value)),
            };
            partition_segment(&field.name, text.as_deref())
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn literal_text(value: &Literal) -> String {
    format!("{value:?}")
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type};

    use super::*;

    fn spec() -> (PartitionSpec, iceberg::spec::SchemaRef) {
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "region", Type::Primitive(PrimitiveType::String))
                        .into(),
                ])
                .build()
                .unwrap(),
        );
        let spec = PartitionSpec::builder(Arc::clone(&schema))
            .add_partition_field("region", "region", Transform::Identity)
            .unwrap()
            .build()
            .unwrap();
        (spec, schema)
    }

    #[test]
    fn a_path_like_value_stays_one_escaped_directory_under_the_data_location() {
        let (spec, schema) = spec();
        let generator = LakeLocationGenerator {
            started: None,
            data_location: "/w/ns/t/data".to_owned(),
        };
        let key = |v: Option<&str>| {
            PartitionKey::new(
                spec.clone(),
                Arc::clone(&schema),
                Struct::from_iter([v.map(Literal::string)]),
            )
        };
        assert_eq!(
            generator.generate_location(Some(&key(Some("../../../../x"))), "f.parquet"),
            "/w/ns/t/data/region=..%2F..%2F..%2F..%2Fx/f.parquet"
        );
        assert_eq!(
            generator.generate_location(Some(&key(None)), "f.parquet"),
            "/w/ns/t/data/region=null/f.parquet"
        );
        let long = "é/".repeat(200);
        let path = generator.generate_location(Some(&key(Some(&long))), "f.parquet");
        let dir = path
            .strip_prefix("/w/ns/t/data/")
            .and_then(|p| p.strip_suffix("/f.parquet"))
            .unwrap();
        assert!(!dir.contains('/') && dir.len() <= 128, "{dir}");
    }
}
