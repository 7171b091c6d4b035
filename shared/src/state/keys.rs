//! Every sort key the engine writes in a pipeline's state partition
//! (`{tenant}#{workspace}#{pipeline}`, see [`super::partition_key`]), in one place.
//!
//! `docs/commit-protocol.md` lists each of them with what its value holds; a test below checks
//! that it does. The catalog pointers of a `SkipprLake` on S3 live in another partition
//! (`catalog#{warehouse}`) and are described with the catalog.

/// The writer lease: its version is the fencing token of the current writer.
pub const LEASE: &str = "lease";
/// The source position: the newest WAL batch id it follows (u64 LE), then the checkpoint.
pub const POSITION: &str = "position";
/// The current schema version, as decimal text.
pub const SCHEMA_VERSION: &str = "schema#version";
/// The last WAL batch id the destination acknowledged (u64 LE).
pub const ACK: &str = "ack";
/// The last WAL batch id the deadletter sink acknowledged (u64 LE).
pub const DEADLETTER_ACK: &str = "ack#deadletters";
/// Written (fenced, empty value) right before each table commit: proves the lease is held.
pub const COMMIT_CHECK: &str = "lease#commit-check";
/// Prefix of the replayed-deadletter-file markers (`replayed#{file}` = the WAL batch id).
pub const REPLAYED_PREFIX: &str = "replayed#";
/// The S3 WAL's reclaim watermark: the id reclaimed through (u64 LE), then the position.
pub const WAL_WATERMARK: &str = "wal#reclaimed";
/// Written (fenced) by the S3 WAL before it replaces an orphaned body.
pub const WAL_CLAIM: &str = "wal#claim";
/// The id floor `skipprd reset` records (u64 LE): every batch id up to it was used by an
/// earlier life of the pipeline, so a fresh WAL numbers its batches above it.
pub const WAL_FLOOR: &str = "wal#floor";

/// Every sort key (prefixes end with `#`).
pub const ALL: &[&str] = &[
    LEASE,
    POSITION,
    SCHEMA_VERSION,
    ACK,
    DEADLETTER_ACK,
    COMMIT_CHECK,
    REPLAYED_PREFIX,
    WAL_WATERMARK,
    WAL_CLAIM,
    WAL_FLOOR,
];

#[cfg(test)]
mod tests {
    use super::ALL;

    #[test]
    fn every_state_sort_key_is_unique() {
        let mut keys = ALL.to_vec();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ALL.len());
    }

    /// The commit protocol's spec names every item the engine keeps in a pipeline's partition.
    #[test]
    fn the_commit_protocol_doc_lists_every_state_sort_key() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/commit-protocol.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let missing: Vec<&str> = ALL
            .iter()
            .copied()
            .filter(|key| {
                let listed = if key.ends_with('#') {
                    format!("`{key}")
                } else {
                    format!("`{key}`")
                };
                !doc.contains(&listed)
            })
            .collect();
        assert!(
            missing.is_empty(),
            "docs/commit-protocol.md does not list {missing:?}"
        );
    }
}
