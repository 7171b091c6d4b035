//! A pipeline's local state, held under its writer lease: what `sync` and `discover` take
//! before they write anything of the pipeline's.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::validate::{Settings, ValidatedPipeline};
use crate::state::{EmbeddedStore, Fence, LocalLease, partition_key};

use super::PipelineError;

/// The pipeline's state directory, its state store and its writer lease.
///
/// Fields drop in order: the store closes before the lease is released, so a writer waiting
/// for the lock finds the store free (redb admits one process at a time).
pub(crate) struct Held {
    /// The embedded state store, opened under the lock.
    pub(crate) store: EmbeddedStore,
    /// The writer lease.
    lease: LocalLease,
    /// `{tenant}#{workspace}#{pipeline}`.
    pub(crate) partition: String,
    /// `<data_dir>/<workspace>_<pipeline>/`.
    pub(crate) state_dir: PathBuf,
}

impl Held {
    /// Create the state directory if needed, take the lease (waiting up to `wait`), then open
    /// the store and take a fencing token.
    pub(crate) fn take(
        settings: &Settings,
        pipeline: &ValidatedPipeline,
        wait: Duration,
    ) -> Result<Held, PipelineError> {
        let state_dir = pipeline.state_dir(settings);
        std::fs::create_dir_all(&state_dir).map_err(|e| PipelineError::Io {
            pipeline: pipeline.name.clone(),
            path: state_dir.clone(),
            message: e.to_string(),
        })?;
        let partition = partition_key(&settings.tenant, &settings.workspace, &pipeline.name);
        let store_path = state_dir.join("state.redb");
        let (lease, store) =
            LocalLease::acquire(&state_dir, &pipeline.name, &partition, wait, || {
                EmbeddedStore::open(&store_path)
            })
            .map_err(|source| PipelineError::State {
                pipeline: pipeline.name.clone(),
                source,
            })?;
        Ok(Held {
            store,
            lease,
            partition,
            state_dir,
        })
    }

    /// The fencing token for every state write made under this lease.
    pub(crate) fn fence(&self) -> Fence {
        self.lease.fence()
    }
}
