//! Where saved schemas live: the I/O edge behind `discover` and `schema`.
//!
//! [`LocalSchemaStore`] keeps the schema file under the pipeline's data directory
//! (`skipprd_el_storage_mode: local`); the S3 store (the skippr bucket) implements the same
//! trait in a later release.

use std::path::PathBuf;

use super::{PipelineSchema, SchemaError};

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
