//! Saving a pipeline's schema: merged into the one saved, never narrowing it, and fenced by
//! the writer lease.
//!
//! `discover` and `sync` both save the schema. A save that simply replaced the saved schema
//! could narrow it: a `discover` over today's files (which no longer hold a column, or hold
//! only small values of a widened one), or a writer that lost its lease and woke up with the
//! schema as it was, would drop columns or types that committed batches and the tables
//! already use. So [`save_schema`]:
//!
//! 1. loads the schema saved now and merges the new one into it with the rules of `sync`'s
//!    evolution ([`crate::schema::evolve::evolve`]): fields are added, types only widen
//!    (`int -> long`), a conflicting type gets a sibling; a field and its widest type, once
//!    saved, stay. Record counts are the caller's (what it sampled);
//! 2. when that changes nothing, writes nothing;
//! 3. else bumps `schema#version` with a **fenced** state write: a writer whose lease was
//!    taken over stops here with `Fenced`, and saves nothing;
//! 4. then saves the merged schema.
//!
//! A writer that stalls between 3 and 4 and saves late still cannot narrow anything: it saves
//! the saved schema merged with its own, so the worst it does is add its own fields, which is
//! what it would have done in time.

use crate::schema::{PipelineSchema, SchemaError, SchemaStore};
use crate::state::{Condition, Fence, StateKey, StateStore, keys};

use super::PipelineError;

/// The writer lease's side of a save: the state store, the pipeline's partition and the fence.
#[derive(Clone, Copy)]
pub(crate) struct Fenced<'a> {
    /// The state store holding `schema#version`.
    pub(crate) store: &'a dyn StateStore,
    /// The pipeline's partition.
    pub(crate) partition: &'a str,
    /// The writer's fencing token.
    pub(crate) fence: Option<Fence>,
}

/// What [`save_schema`] did.
#[derive(Debug, Clone)]
pub(crate) struct Saved {
    /// The schema saved now (or left as it was): the saved one merged with the caller's.
    pub(crate) schema: PipelineSchema,
    /// The schema version after the save (with a state store), else `None`.
    pub(crate) version: Option<u32>,
    /// Whether anything was written.
    pub(crate) changed: bool,
}

/// Save `schema` merged into the saved one (see the module docs); with `fenced`, bump
/// `schema#version` under the lease first.
pub(crate) fn save_schema(
    schemas: &dyn SchemaStore,
    schema: &PipelineSchema,
    fenced: Option<Fenced<'_>>,
    pipeline: &str,
) -> Result<Saved, PipelineError> {
    let schema_err = |source| PipelineError::Schema {
        pipeline: pipeline.to_owned(),
        source,
    };
    let state_err = |source| PipelineError::State {
        pipeline: pipeline.to_owned(),
        source,
    };
    let saved = match schemas.load() {
        Ok(saved) => Some(saved),
        Err(SchemaError::NotFound { .. }) => None,
        Err(e) => return Err(schema_err(e)),
    };
    let merged = match &saved {
        Some(saved) => merge(saved, schema),
        None => schema.clone(),
    };
    let version_key = fenced.map(|f| StateKey::new(f.partition, keys::SCHEMA_VERSION));
    let current_version = match (fenced, &version_key) {
        (Some(f), Some(key)) => Some(match f.store.get(key).map_err(state_err)? {
            Some(item) => String::from_utf8_lossy(&item.value)
                .parse::<u32>()
                .map_err(|_| {
                    state_err(crate::state::StateError::Corrupt {
                        key: key.to_string(),
                        message: "the schema version is not a number".to_owned(),
                    })
                })?,
            None => 1,
        }),
        _ => None,
    };
    if saved.as_ref() == Some(&merged) {
        return Ok(Saved {
            schema: merged,
            version: current_version,
            changed: false,
        });
    }
    let version = match (fenced, &version_key, current_version) {
        (Some(f), Some(key), Some(current)) => {
            let next = current + 1;
            f.store
                .put(key, next.to_string().as_bytes(), Condition::Any, f.fence)
                .map_err(state_err)?;
            Some(next)
        }
        _ => None,
    };
    schemas.save(&merged).map_err(schema_err)?;
    Ok(Saved {
        schema: merged,
        version,
        changed: true,
    })
}

/// `saved` with `new` folded in: nothing of `saved` is lost or narrowed; the record counts of
/// `new`'s namespaces are `new`'s.
pub(crate) fn merge(saved: &PipelineSchema, new: &PipelineSchema) -> PipelineSchema {
    let mut merged = saved.clone();
    crate::schema::evolve::evolve(&mut merged, new);
    for (name, ns) in &new.namespaces {
        if let Some(m) = merged.namespaces.get_mut(name) {
            m.records = ns.records;
        }
    }
    merged
}

#[cfg(test)]
mod tests;
