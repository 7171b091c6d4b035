//! Where a pipeline's durable parts live: its WAL (a directory, or a prefix in the WAL
//! bucket), its state store partition, and whether its pass needs AWS at all (and which
//! region to fall back on). Pure: nothing here opens a file or loads a configuration.

use std::path::PathBuf;

use super::super::StorageMode;
use super::super::connectors::{DeadletterConnector, SourceConnector};
use super::destination::{Destination, DestinationKind, LakeCatalog};
use super::{Named, Settings, StoreKind, WalStorage};

/// Where a pipeline's WAL lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalLocation {
    /// Segment files in this directory (`<state dir>/wal`).
    Disk {
        /// The WAL's directory.
        dir: PathBuf,
    },
    /// Objects under `prefix` in `bucket` (`WAL_STORAGE=s3`).
    S3 {
        /// The WAL bucket: `skippr.wal_s3_bucket`, else `skippr.skippr_s3_bucket`.
        bucket: String,
        /// The pipeline's prefix, `wal/{tenant}/{workspace}/{pipeline}/`.
        prefix: String,
    },
}

/// A pipeline's part of the state store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineStore {
    /// The store (the project's `skippr.store`).
    pub kind: StoreKind,
    /// The partition of every item of the pipeline (`{tenant}#{workspace}#{pipeline}`); also
    /// the identity a lake destination records its deliveries under.
    pub partition: String,
}

/// What a pipeline's pass needs of AWS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsSettings {
    /// Whether a backend of the pass (S3 WAL, DynamoDB store, schemas in S3, an S3 source, an
    /// `AthenaIceberg` destination, an S3 deadletter sink) needs an AWS configuration.
    pub needed: bool,
    /// The region to use when the environment names none: the S3 source's `region`, else the
    /// `AthenaIceberg` destination's (their own clients use their connector's region either
    /// way).
    pub fallback_region: Option<String>,
}

/// The WAL location of pipeline `name` whose state directory is `state_dir`. With
/// `WAL_STORAGE=s3` the settings hold a bucket (validation refuses it without one).
pub(super) fn wal_location(
    settings: &Settings,
    name: &str,
    state_dir: PathBuf,
) -> Option<WalLocation> {
    match settings.wal_storage {
        WalStorage::Disk => Some(WalLocation::Disk {
            dir: state_dir.join("wal"),
        }),
        WalStorage::S3 => settings
            .wal_s3_bucket
            .clone()
            .or_else(|| settings.skippr_s3_bucket.clone())
            .map(|bucket| WalLocation::S3 {
                bucket,
                prefix: format!("wal/{}/{}/{name}/", settings.tenant, settings.workspace),
            }),
    }
}

/// The state store partition of pipeline `name`.
pub(super) fn pipeline_store(settings: &Settings, name: &str) -> PipelineStore {
    PipelineStore {
        kind: settings.store.clone(),
        partition: crate::state::partition_key(&settings.tenant, &settings.workspace, name),
    }
}

/// What the pass of a pipeline with these parts needs of AWS.
pub(super) fn aws_settings(
    settings: &Settings,
    source: &Named<SourceConnector>,
    destination: Option<&Destination>,
    files: Option<&super::FileDestination>,
    deadletter_sink: Option<&Named<DeadletterConnector>>,
) -> AwsSettings {
    use super::FileDestinationKind;
    let files_region = files.and_then(|f| match &f.kind {
        FileDestinationKind::S3 { region, .. } => Some(region.clone()),
        FileDestinationKind::Athena(t) => Some(t.region.clone()),
        _ => None,
    });
    let athena_region = destination.and_then(|d| match (&d.kind, &d.location.catalog) {
        (DestinationKind::AthenaIceberg { .. }, LakeCatalog::Glue { region, .. }) => {
            Some(region.clone())
        }
        _ => None,
    });
    let needed = settings.wal_storage == WalStorage::S3
        || matches!(settings.store, StoreKind::Dynamodb { .. })
        || settings.storage_mode == StorageMode::S3
        || matches!(source.connector, SourceConnector::S3(_))
        || athena_region.is_some()
        || files_region.is_some()
        || matches!(
            deadletter_sink.map(|d| &d.connector),
            Some(DeadletterConnector::S3(_))
        );
    let fallback_region = match &source.connector {
        SourceConnector::S3(c) if c.region.is_some() => c.region.clone(),
        _ => athena_region.flatten().or(files_region.flatten()),
    };
    AwsSettings {
        needed,
        fallback_region,
    }
}
