//! Snapshot expiry: which snapshots go, and the metadata commit that removes them.
//!
//! A snapshot of `main`'s history is expired when it is not among the newest
//! [`Policy::retain_last`] and it stopped being current (its child was committed) more than
//! [`Policy::max_snapshot_age`] ago. Measuring from when it stopped being current, not from
//! its own timestamp, means a reader that opened the table up to that long ago still finds
//! every file of the snapshot it reads, even after a quiet day and then a burst of commits.
//!
//! iceberg-rust 0.10's `ExpireSnapshotsAction` expires by a snapshot's own age (always also
//! applying the table's `history.expire.max-snapshot-age-ms`, default 5 days) and deletes no
//! files; the selection here is ours and the commit is a plain `RemoveSnapshots` through the
//! catalog, required to apply to the same table and the same current snapshot.

use iceberg::spec::{MAIN_BRANCH, SnapshotRef, TableMetadata};
use iceberg::table::Table;
use iceberg::{ErrorKind, TableRequirement, TableUpdate};

use super::{Policy, table_name};
use crate::sinks::SinkError;
use crate::sinks::iceberg::catalog::{FileCatalog, LakePointer};

/// `main`'s history, newest first (the current snapshot, its parent, ...).
pub fn history(metadata: &TableMetadata) -> Vec<SnapshotRef> {
    let mut chain: Vec<SnapshotRef> = Vec::new();
    let mut next = metadata.current_snapshot().cloned();
    let limit = metadata.snapshots().len();
    while let Some(snapshot) = next {
        if chain.len() >= limit {
            break;
        }
        next = snapshot
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p))
            .cloned();
        chain.push(snapshot);
    }
    chain
}

/// The snapshots `policy` expires at `now_ms`, oldest last; `None` when the table has refs
/// besides `main` (branches or tags of other tools), which maintenance leaves alone.
pub fn expirable(metadata: &TableMetadata, policy: &Policy, now_ms: i64) -> Option<Vec<i64>> {
    let max_age = i64::try_from(policy.max_snapshot_age.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now_ms.saturating_sub(max_age);
    let retain = policy.retain_last.max(1);
    let mut ids = Vec::new();
    let mut superseded_at = now_ms;
    for (i, snapshot) in history(metadata).iter().enumerate() {
        if i >= retain && superseded_at <= cutoff {
            ids.push(snapshot.snapshot_id());
        }
        superseded_at = snapshot.timestamp_ms();
    }
    if !ids.is_empty() && has_other_refs(metadata) {
        return None;
    }
    Some(ids)
}

/// Whether the metadata names a branch or tag besides `main` (iceberg-rust keeps the refs
/// map private, so it is read from the serialized form).
fn has_other_refs(metadata: &TableMetadata) -> bool {
    match serde_json::to_value(metadata) {
        Ok(value) => value
            .get("refs")
            .and_then(|r| r.as_object())
            .is_some_and(|refs| refs.keys().any(|k| k != MAIN_BRANCH)),
        // Unknown: assume there are, and expire nothing.
        Err(_) => true,
    }
}

/// Remove the snapshots `ids` of `table`. `None` when a concurrent commit changed the table
/// first (nothing was changed; the next run tries again).
pub async fn expire(
    catalog: &FileCatalog<LakePointer>,
    table: &Table,
    ids: &[i64],
) -> Result<Option<Table>, SinkError> {
    let metadata = table.metadata();
    let ident = table.identifier();
    let result = catalog
        .commit_updates(
            ident,
            vec![
                TableRequirement::UuidMatch {
                    uuid: metadata.uuid(),
                },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: MAIN_BRANCH.to_owned(),
                    snapshot_id: metadata.current_snapshot_id(),
                },
            ],
            vec![TableUpdate::RemoveSnapshots {
                snapshot_ids: ids.to_vec(),
            }],
        )
        .await;
    match result {
        Ok(table) => Ok(Some(table)),
        Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
            tracing::info!(table = %table_name(ident), error = %e, "Snapshot expiry skipped: the table changed meanwhile.");
            Ok(None)
        }
        Err(e) => Err(SinkError::Iceberg {
            table: table_name(ident),
            source: Box::new(e),
        }),
    }
}
