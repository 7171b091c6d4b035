//! A pipeline's state, held under its writer lease: what `sync` and `discover` take before
//! they write anything of the pipeline's.
//!
//! With the embedded store (`store.type: sled`, the default) the lease is a local file lock
//! and the store a redb file in the state directory; with `store.type: dynamodb` both live in
//! the DynamoDB table (see [`crate::state::dynamo_lease`]). The state directory exists in
//! both cases (the WAL and the local schema live there). Whenever the WAL is on disk the
//! local file lock is taken too, DynamoDB lease or not: a DynamoDB lease expires while its
//! holder is frozen, and a frozen process that wakes must not write over a new holder's
//! batches in the same WAL directory; the file lock is held until the process ends.
//!
//! A writer that has to wait for the lease says so once, through the observer
//! ([`Event::LeaseWaiting`]): who holds it, until when, and how long it waits at most.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::validate::{Settings, StoreKind, ValidatedPipeline, WalLocation};
use crate::state::{
    DynamoLease, DynamoStore, EmbeddedStore, Fence, LeaseWait, LocalLease, LocalLock, StateError,
    StateStore, partition_key,
};

use super::PipelineError;
use super::events::{Event, Observer};

/// The writer lease, of the kind that goes with the store.
enum Lease {
    /// An OS file lock in the state directory (embedded store).
    Local(LocalLease),
    /// An expiring, heartbeated item in the DynamoDB table, with the state directory's file
    /// lock when the WAL is on disk.
    Dynamo {
        /// The DynamoDB lease.
        lease: DynamoLease,
        /// Held (never read) until the lease drops.
        _lock: Option<LocalLock>,
    },
}

/// The pipeline's state directory, its state store and its writer lease.
///
/// Fields drop in order: the store closes before the lease is released, so a writer waiting
/// for the lock finds the store free (redb admits one process at a time).
pub(crate) struct Held {
    /// The state store, opened under the lease.
    pub(crate) store: Box<dyn StateStore>,
    /// The writer lease.
    lease: Lease,
    /// `{tenant}#{workspace}#{pipeline}`.
    pub(crate) partition: String,
    /// `<data_dir>/<workspace>_<pipeline>/`.
    pub(crate) state_dir: PathBuf,
}

impl Held {
    /// Create the state directory if needed, take the lease (waiting up to `wait`; the
    /// observer hears once when the wait starts), then open the store and take a fencing
    /// token.
    pub(crate) fn take(
        settings: &Settings,
        pipeline: &ValidatedPipeline,
        wait: Duration,
        observer: &mut dyn Observer,
    ) -> Result<Held, PipelineError> {
        Held::take_with(settings, pipeline, wait, None, observer)
    }

    /// [`Held::take`], with the caller's AWS handle for the DynamoDB store (else one is
    /// loaded from the environment).
    pub(crate) fn take_with(
        settings: &Settings,
        pipeline: &ValidatedPipeline,
        wait: Duration,
        aws: Option<&crate::aws::Aws>,
        observer: &mut dyn Observer,
    ) -> Result<Held, PipelineError> {
        let state_dir = pipeline.state_dir(settings);
        std::fs::create_dir_all(&state_dir).map_err(|e| PipelineError::Io {
            pipeline: pipeline.name.clone(),
            path: state_dir.clone(),
            message: e.to_string(),
        })?;
        let partition = partition_key(&settings.tenant, &settings.workspace, &pipeline.name);
        let state_err = |source| PipelineError::State {
            pipeline: pipeline.name.clone(),
            source,
        };
        let mut on_wait = |w: &LeaseWait| {
            tracing::info!(pipeline = %pipeline.name, holder = %w.holder, expires_in_ms = ?w.expires_in_ms, wait_ms = w.wait.as_millis() as u64, "Waiting for the writer lease.");
            observer.event(&Event::LeaseWaiting {
                pipeline: pipeline.name.clone(),
                holder: w.holder.clone(),
                expires_in_ms: w.expires_in_ms,
                wait_ms: u64::try_from(w.wait.as_millis()).unwrap_or(u64::MAX),
            });
        };
        let (store, lease): (Box<dyn StateStore>, Lease) = match &settings.store {
            StoreKind::Embedded => {
                let store_path = state_dir.join("state.redb");
                let (lease, store) = LocalLease::acquire_observed(
                    &state_dir,
                    &pipeline.name,
                    &partition,
                    wait,
                    &mut on_wait,
                    || EmbeddedStore::open(&store_path),
                )
                .map_err(state_err)?;
                (Box::new(store), Lease::Local(lease))
            }
            StoreKind::Dynamodb { table } => {
                // A disk WAL is one machine's: one process at a time, frozen or not.
                let lock = match &pipeline.wal {
                    WalLocation::Disk { .. } => Some(
                        LocalLock::acquire(&state_dir, &pipeline.name, wait, &mut on_wait)
                            .map_err(state_err)?,
                    ),
                    WalLocation::S3 { .. } => None,
                };
                let aws = match aws {
                    Some(aws) => aws.clone(),
                    None => crate::aws::Aws::load(None)
                        .map_err(|e| state_err(StateError::AwsSetup(e)))?,
                };
                let store = DynamoStore::open(&aws, table).map_err(state_err)?;
                let lease = DynamoLease::acquire_observed(
                    Arc::new(store.clone()),
                    &pipeline.name,
                    &partition,
                    wait,
                    settings.lease_ttl,
                    &mut on_wait,
                )
                .map_err(state_err)?;
                (Box::new(store), Lease::Dynamo { lease, _lock: lock })
            }
        };
        Ok(Held {
            store,
            lease,
            partition,
            state_dir,
        })
    }

    /// The fencing token for every state write made under this lease.
    pub(crate) fn fence(&self) -> Fence {
        match &self.lease {
            Lease::Local(lease) => lease.fence(),
            Lease::Dynamo { lease, .. } => lease.fence(),
        }
    }

    /// Whether the lease is known to have been taken over by another writer (the DynamoDB
    /// lease's heartbeat found it so); fenced writes fail from then on anyway.
    #[allow(
        dead_code,
        reason = "for the pass loop to stop early; fencing already protects"
    )]
    pub(crate) fn is_lost(&self) -> bool {
        match &self.lease {
            Lease::Local(_) => false,
            Lease::Dynamo { lease, .. } => lease.is_lost(),
        }
    }

    /// What a writer frozen by SIGSTOP looks like to the others: the DynamoDB lease's
    /// heartbeat stops (the lease expires after its TTL) while the process keeps its file
    /// lock. Returns the lock, held until dropped.
    #[cfg(test)]
    pub(crate) fn freeze(self) -> Option<LocalLock> {
        match self.lease {
            Lease::Local(_) => None,
            Lease::Dynamo { lease, _lock } => {
                lease.freeze();
                _lock
            }
        }
    }
}

/// The AWS handle a command on `pipeline` uses: `given` (one per process, when the caller
/// built it), else one loaded now when the pipeline needs AWS (its region falling back to
/// the connectors'), else none.
pub(crate) fn pipeline_aws(
    given: Option<&crate::aws::Aws>,
    pipeline: &crate::config::ValidatedPipeline,
) -> Result<Option<crate::aws::Aws>, super::error::PipelineError> {
    match (given, pipeline.aws.needed) {
        (Some(aws), _) => Ok(Some(aws.clone())),
        (None, true) => {
            crate::aws::Aws::load_with_fallback(pipeline.aws.fallback_region.as_deref())
                .map(Some)
                .map_err(|source| super::error::PipelineError::Aws {
                    pipeline: pipeline.name.clone(),
                    source,
                })
        }
        (None, false) => Ok(None),
    }
}

#[cfg(test)]
mod tests;
