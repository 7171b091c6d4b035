//! Where saved schemas live: the I/O edge behind `discover`, `sync` and `schema`.
//!
//! - [`LocalSchemaStore`] keeps the schema file under the pipeline's data directory
//!   (`skipprd_el_storage_mode: local`): `<data_dir>/<workspace>_<pipeline>/schema.json`.
//! - [`S3SchemaStore`] keeps it as one object in the skippr bucket
//!   (`skipprd_el_storage_mode: s3`): `s3://{skippr_s3_bucket}/schemas/{tenant}/{workspace}/{pipeline}/schema.json`
//!   (see [`S3SchemaStore::key_for`]).
//!
//! Both hold the same bytes ([`PipelineSchema::to_json_pretty`]), so a schema written by one
//! writer (the Lambda `discover`) is read by any other (the CLI's `schema` and `sync`). A save
//! replaces the whole schema in one step: a rename on disk, one PUT in S3. Writers of one
//! pipeline are serialised by its writer lease, which `discover` and `sync` hold while they
//! save. [`PipelineSchemaStore`] is the store a pipeline's settings choose.

use std::path::{Path, PathBuf};

use super::{PipelineSchema, SchemaError};
use crate::aws::Bucket;

/// Saves and loads one pipeline's schema.
pub trait SchemaStore {
    /// Save `schema`, replacing the previous one atomically.
    fn save(&self, schema: &PipelineSchema) -> Result<(), SchemaError>;
    /// Load the saved schema; [`SchemaError::NotFound`] when `discover` never ran.
    fn load(&self) -> Result<PipelineSchema, SchemaError>;
    /// Where the schema lives, for messages (`/data/default_p/schema.json`).
    fn location(&self) -> String;
}

/// A schema file on local disk.
#[derive(Debug, Clone)]
pub struct LocalSchemaStore {
    path: PathBuf,
}

impl LocalSchemaStore {
    /// The store at `path`.
    pub fn new(path: PathBuf) -> Self {
        LocalSchemaStore { path }
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl SchemaStore for LocalSchemaStore {
    fn save(&self, schema: &PipelineSchema) -> Result<(), SchemaError> {
        schema.save(&self.path)
    }

    fn load(&self) -> Result<PipelineSchema, SchemaError> {
        PipelineSchema::load(&self.path)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

/// A schema object in S3 (the skippr bucket).
#[derive(Debug, Clone)]
pub struct S3SchemaStore {
    bucket: Bucket,
    key: String,
}

impl S3SchemaStore {
    /// The object's key for a pipeline: `schemas/{tenant}/{workspace}/{pipeline}/schema.json`
    /// (the S3 WAL's objects are under `wal/{tenant}/{workspace}/{pipeline}/` beside it).
    pub fn key_for(tenant: &str, workspace: &str, pipeline: &str) -> String {
        format!("schemas/{tenant}/{workspace}/{pipeline}/schema.json")
    }

    /// The store of the object `key` in `bucket`.
    pub fn new(bucket: Bucket, key: String) -> Self {
        S3SchemaStore { bucket, key }
    }

    /// The object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `s3://bucket/key`.
    pub fn uri(&self) -> String {
        self.bucket.uri(&self.key)
    }

    fn failed(&self, op: &'static str, failure: crate::aws::SdkFailure) -> SchemaError {
        SchemaError::ObjectStore {
            op,
            uri: self.uri(),
            failure: Box::new(failure),
        }
    }
}

impl SchemaStore for S3SchemaStore {
    fn save(&self, schema: &PipelineSchema) -> Result<(), SchemaError> {
        let bytes = schema.to_json_pretty().into_bytes();
        self.bucket
            .put(&self.key, bytes, "application/json")
            .map_err(|failure| self.failed("write", failure))
    }

    fn load(&self) -> Result<PipelineSchema, SchemaError> {
        let uri = self.uri();
        let bytes = self
            .bucket
            .get(&self.key)
            .map_err(|failure| self.failed("read", failure))?
            .ok_or_else(|| SchemaError::NotFound {
                path: PathBuf::from(&uri),
            })?;
        let text = String::from_utf8(bytes).map_err(|e| SchemaError::Invalid {
            path: PathBuf::from(&uri),
            message: format!("not UTF-8 text: {e}"),
        })?;
        PipelineSchema::from_json(&text, Path::new(&uri))
    }

    fn location(&self) -> String {
        self.uri()
    }
}

/// The schema store a pipeline's `skipprd_el_storage_mode` chooses.
#[derive(Debug, Clone)]
pub enum PipelineSchemaStore {
    /// `local`: a file under the pipeline's data directory.
    Local(LocalSchemaStore),
    /// `s3`: an object in the skippr bucket.
    S3(Box<S3SchemaStore>),
}

impl PipelineSchemaStore {
    fn inner(&self) -> &dyn SchemaStore {
        match self {
            PipelineSchemaStore::Local(store) => store,
            PipelineSchemaStore::S3(store) => store.as_ref(),
        }
    }
}

impl SchemaStore for PipelineSchemaStore {
    fn save(&self, schema: &PipelineSchema) -> Result<(), SchemaError> {
        self.inner().save(schema)
    }

    fn load(&self) -> Result<PipelineSchema, SchemaError> {
        self.inner().load()
    }

    fn location(&self) -> String {
        self.inner().location()
    }
}

/// An in-memory store, for tests of the commands.
#[derive(Debug, Default)]
pub struct MemorySchemaStore {
    saved: std::sync::Mutex<Option<String>>,
}

impl SchemaStore for MemorySchemaStore {
    fn save(&self, schema: &PipelineSchema) -> Result<(), SchemaError> {
        let mut saved = self
            .saved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *saved = Some(schema.to_json_pretty());
        Ok(())
    }

    fn load(&self) -> Result<PipelineSchema, SchemaError> {
        let saved = self
            .saved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match saved.as_deref() {
            Some(text) => PipelineSchema::from_json(text, std::path::Path::new("memory")),
            None => Err(SchemaError::NotFound {
                path: PathBuf::from("memory"),
            }),
        }
    }

    fn location(&self) -> String {
        "memory".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::aws::testing::{bucket, moto};
    use crate::schema::{Field, FieldType, NamespaceSchema};

    fn schema() -> PipelineSchema {
        let mut namespaces = BTreeMap::new();
        namespaces.insert(
            "orders".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new("id", FieldType::Long),
                    Field::new("price", FieldType::Double),
                ],
                records: 3,
            },
        );
        PipelineSchema {
            format_version: 1,
            workspace: "acme".into(),
            pipeline: "shop".into(),
            namespaces,
        }
    }

    #[test]
    fn the_key_layout_is_schemas_tenant_workspace_pipeline() {
        assert_eq!(
            S3SchemaStore::key_for("t1", "acme", "shop"),
            "schemas/t1/acme/shop/schema.json"
        );
    }

    #[test]
    fn s3_store_round_trips_the_same_bytes_as_the_local_file() {
        let aws = moto();
        let name = bucket(&aws, "schemas");
        let s3 = Bucket::new(&aws, &name, None);
        let key = S3SchemaStore::key_for("t", "acme", "shop");
        let store = PipelineSchemaStore::S3(Box::new(S3SchemaStore::new(s3.clone(), key.clone())));
        assert_eq!(
            store.location(),
            format!("s3://{name}/schemas/t/acme/shop/schema.json")
        );

        let mut schema = schema();
        store.save(&schema).unwrap();
        assert_eq!(store.load().unwrap(), schema);

        // The object holds exactly the bytes the local store writes.
        let dir = tempfile::tempdir().unwrap();
        let local = LocalSchemaStore::new(dir.path().join("schema.json"));
        local.save(&schema).unwrap();
        let object = s3.get(&key).unwrap().unwrap();
        assert_eq!(object, std::fs::read(local.path()).unwrap());

        // A second save replaces the object.
        schema.namespaces.get_mut("orders").unwrap().records = 4;
        store.save(&schema).unwrap();
        assert_eq!(store.load().unwrap().namespaces["orders"].records, 4);
        assert_eq!(s3.list("schemas/").unwrap(), vec![key]);
    }

    #[test]
    fn a_missing_object_is_not_found_naming_the_uri() {
        let aws = moto();
        let name = bucket(&aws, "schemas");
        let store = S3SchemaStore::new(
            Bucket::new(&aws, &name, None),
            S3SchemaStore::key_for("t", "w", "never"),
        );
        let error = store.load().unwrap_err();
        assert!(matches!(error, SchemaError::NotFound { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "no saved schema at `s3://{name}/schemas/t/w/never/schema.json`: run `skipprd discover` first"
            )
        );
    }

    #[test]
    fn a_missing_bucket_is_an_error_naming_the_uri_not_a_missing_schema() {
        let aws = moto();
        let store = S3SchemaStore::new(
            Bucket::new(&aws, "no-such-bucket-skipprd", None),
            S3SchemaStore::key_for("t", "w", "p"),
        );
        let error = store.load().unwrap_err();
        assert!(
            matches!(error, SchemaError::ObjectStore { op: "read", .. }),
            "{error:?}"
        );
        assert!(!error.is_retryable(), "{error}");
        assert!(
            error
                .to_string()
                .contains("s3://no-such-bucket-skipprd/schemas/t/w/p/schema.json"),
            "{error}"
        );
    }

    #[test]
    fn a_malformed_object_is_invalid_naming_the_uri() {
        let aws = moto();
        let name = bucket(&aws, "schemas");
        let s3 = Bucket::new(&aws, &name, None);
        let key = S3SchemaStore::key_for("t", "w", "p");
        s3.put(
            &key,
            b"{\"format_version\": 1}".to_vec(),
            "application/json",
        )
        .unwrap();
        let error = S3SchemaStore::new(s3, key).load().unwrap_err();
        assert!(matches!(error, SchemaError::Invalid { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .contains(&format!("s3://{name}/schemas/t/w/p/schema.json")),
            "{error}"
        );
    }
}
