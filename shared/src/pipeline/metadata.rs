//! `skipprd metadata apply`: a schema written or edited by hand (the saved format, as
//! `schema --output json` or `metadata show` print it) merged into the pipeline's saved schema,
//! under the writer lease, as `discover` saves what it infers (see `pipeline/schema_save.rs`):
//! namespaces and fields are added and types widen; nothing saved is dropped or narrowed. A
//! pipeline can so be given its tables before the first record arrives. `metadata show` is
//! the saved schema itself (the caller loads it with [`super::discover::schema_store`]).

use std::path::Path;
use std::time::Duration;

use crate::config::{ValidatedConfig, ValidatedPipeline};
use crate::schema::{PipelineSchema, SchemaError, SchemaStore};

use super::PipelineError;
use super::discover::schema_store;
use super::events::{Event, Observer};
use super::held::Held;
use super::schema_save::{Fenced, save_schema};

/// Merge the schema in `file` into `pipeline`'s saved schema, under the writer lease (waiting
/// up to `lease_wait`). Says `metadata_applied`.
///
/// # Errors
///
/// [`PipelineError::Schema`] for a file that cannot be read or is not a saved schema (the
/// message names the file and what is wrong), or one written for another pipeline or
/// workspace; the lease and state errors of any writer.
pub fn apply(
    config: &ValidatedConfig,
    pipeline: &ValidatedPipeline,
    file: &Path,
    lease_wait: Duration,
    observer: &mut dyn Observer,
) -> Result<PipelineSchema, PipelineError> {
    let name = pipeline.name.clone();
    let schema_err = |source| PipelineError::Schema {
        pipeline: name.clone(),
        source,
    };
    let text = std::fs::read_to_string(file).map_err(|error| {
        schema_err(SchemaError::Io {
            action: "read",
            path: file.to_path_buf(),
            error,
        })
    })?;
    let given = PipelineSchema::from_json(&text, file).map_err(schema_err)?;
    let workspace = &config.settings.workspace;
    if given.pipeline != name || &given.workspace != workspace {
        return Err(schema_err(SchemaError::Invalid {
            path: file.to_path_buf(),
            message: format!(
                "it is the schema of pipeline '{}' in workspace '{}', not of '{name}' in '{workspace}' (set its `pipeline` and `workspace` keys to apply it here)",
                given.pipeline, given.workspace
            ),
        }));
    }
    let store = schema_store(&config.settings, pipeline, None)?;
    let held = Held::take(&config.settings, pipeline, lease_wait, observer)?;
    let lease = Fenced {
        store: &*held.store,
        partition: &held.partition,
        fence: Some(held.fence()),
    };
    let saved = save_schema(&store, &given, Some(lease), &name)?;
    drop(held);
    observer.event(&Event::MetadataApplied {
        pipeline: name,
        changed: saved.changed,
        version: saved.version,
        namespaces: saved.schema.namespaces.len() as u64,
        schema_path: store.location().into(),
    });
    Ok(saved.schema)
}
