//! `skipprd doctor`: checks that a validated config can run, without reading or writing any
//! data. For each pipeline: the source opens (a File source's path or glob matches; an S3
//! source's bucket answers a one-key listing; a Postgres source connects, its tables are
//! readable, and `wal_level`, the replication slot and the publication are reported, see
//! [`crate::sources::postgres::doctor`]), the local state directory is writable and its
//! disk has room (the thresholds of the sync's disk guard), the embedded state store and the
//! disk WAL read back (read-only: both are safe beside a running sync), the S3 WAL bucket, the DynamoDB
//! state table, the destination (warehouse directory or bucket, Glue database), the skippr
//! bucket for schemas and the S3 deadletter bucket answer. Each check is `ok`, `warn` or
//! `fail`, with a suggested fix for the last two.
//!
//! Parsing and validating the config (references, `${NAME}` variables, secrets) is the
//! caller's first check: this module starts from a [`ValidatedConfig`].

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::aws::{Aws, SdkFailure};
use crate::config::connectors::{DeadletterConnector, SourceConnector};
use crate::config::validate::{LakeCatalog, StoreKind, WalLocation, WalStorage};
use crate::config::{StorageMode, ValidatedConfig, ValidatedPipeline};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Works, but something will happen the user should know about.
    Warn,
    /// Will fail.
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked: `{pipeline}: {part}` or a global part (`config`, `aws`).
    pub name: String,
    /// The outcome.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about a `warn` or `fail`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// An `ok` check.
    pub fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A `fail` check with its fix.
    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            name: name.into(),
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn warn(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            ..Check::fail(name, detail, fix)
        }
    }
}

/// The `doctor_complete` event: `{event, ok, checks}`, each check with the real product's
/// fields (`ok`, `severity`: `info`, `warning` or `error`; `message`; `suggested_fix_command`,
/// `null` when there is nothing to do) and ours (`name`, `status`, `detail`, `fix`).
pub fn report_json(checks: &[Check], ok: bool) -> serde_json::Value {
    let checks: Vec<serde_json::Value> = checks
        .iter()
        .map(|check| {
            let severity = match check.status {
                Status::Ok => "info",
                Status::Warn => "warning",
                Status::Fail => "error",
            };
            serde_json::json!({
                "name": check.name,
                "ok": check.status != Status::Fail,
                "severity": severity,
                "message": format!("{}: {}", check.name, check.detail),
                "suggested_fix_command": check.fix,
                "status": check.status,
                "detail": check.detail,
                "fix": check.fix,
            })
        })
        .collect();
    serde_json::json!({
        "event": "doctor_complete",
        "ok": ok,
        "checks": checks,
    })
}

/// The whole `doctor`: the config first (a `fail` check when it did not load or validate,
/// with `error`'s message), then every pipeline's checks ([`diagnose`]). Returns the checks and
/// the exit code the CLI uses: 0 all fine, 1 a pipeline check failed, 2 the config is wrong.
/// The CLI and the Python `Session.doctor()` both call this.
pub fn run<E: std::fmt::Display>(config: Result<&ValidatedConfig, &E>) -> (Vec<Check>, u8) {
    match config {
        Ok(config) => {
            let mut checks = vec![Check::ok(
                "config",
                format!("{} ({} pipeline(s))", config.file, config.pipelines.len()),
            )];
            checks.extend(diagnose(config));
            let failed = checks.iter().any(|c| c.status == Status::Fail);
            (checks, u8::from(failed))
        }
        Err(error) => (
            vec![Check::fail(
                "config",
                error.to_string(),
                "fix the file as the message says (reference: docs/config.md)",
            )],
            2,
        ),
    }
}

/// Run every check of every pipeline of `config`, in order.
pub fn diagnose(config: &ValidatedConfig) -> Vec<Check> {
    let mut checks = Vec::new();
    for pipeline in config.pipelines.values() {
        Pipeline {
            config,
            pipeline,
            aws: None,
            checks: &mut checks,
        }
        .run();
    }
    checks
}

/// The checks of one pipeline.
struct Pipeline<'a> {
    config: &'a ValidatedConfig,
    pipeline: &'a ValidatedPipeline,
    /// Loaded at the first check that needs it: `Err` once it failed (reported once).
    aws: Option<Result<Aws, ()>>,
    checks: &'a mut Vec<Check>,
}

impl Pipeline<'_> {
    fn name(&self, part: &str) -> String {
        format!("{}: {part}", self.pipeline.name)
    }

    fn push(&mut self, check: Check) {
        self.checks.push(check);
    }

    /// The AWS handle, or `None` after reporting why there is none.
    fn aws(&mut self) -> Option<Aws> {
        if self.aws.is_none() {
            let fallback = self.pipeline.aws.fallback_region.as_deref();
            let loaded = Aws::load_with_fallback(fallback).map_err(|e| {
                let check = Check::fail(
                    self.name("aws"),
                    e.to_string(),
                    "set AWS_REGION (or the connector's `region`) and credentials the standard way (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, an instance role)",
                );
                self.checks.push(check);
            });
            self.aws = Some(loaded);
        }
        self.aws.clone().and_then(Result::ok)
    }

    fn run(&mut self) {
        let settings = &self.config.settings;
        self.source();
        let state_dir = self.pipeline.state_dir(settings);
        if settings.wal_storage == WalStorage::Disk || settings.store == StoreKind::Embedded {
            self.writable("state directory", &state_dir);
            self.disk(&state_dir);
        }
        if settings.store == StoreKind::Embedded {
            self.state_file(&state_dir.join("state.redb"));
        }
        if let WalLocation::Disk { dir } = &self.pipeline.wal {
            self.disk_wal(dir);
        }
        if let WalLocation::S3 { bucket, prefix } = &self.pipeline.wal {
            self.bucket("WAL in S3", bucket, prefix);
        }
        if let StoreKind::Dynamodb { table } = &settings.store {
            self.state_table(table);
        }
        if settings.storage_mode == StorageMode::S3
            && let Some(bucket) = settings.skippr_s3_bucket.clone()
        {
            self.bucket("schemas in S3", &bucket, "schemas/");
        }
        self.destination();
        if let Some(deadletters) = &self.pipeline.deadletter_sink
            && let DeadletterConnector::S3(c) = &deadletters.connector
        {
            let (bucket, prefix) = (c.s3_bucket.clone(), c.s3_prefix.clone().unwrap_or_default());
            self.bucket("deadletters in S3", &bucket, &prefix);
        }
    }

    fn source(&mut self) {
        let name = self.name("source");
        if let SourceConnector::Postgres(c) = &self.pipeline.source.connector {
            for check in crate::sources::postgres::doctor::diagnose(c, self.pipeline.cdc.as_ref()) {
                let part = self.name(&format!("source {}", check.part));
                self.push(match check.fix {
                    None => Check::ok(part, check.detail),
                    Some(fix) => Check::fail(part, check.detail, fix),
                });
            }
            return;
        }
        if let SourceConnector::S3(c) = &self.pipeline.source.connector {
            let prefix = c.s3_prefix.clone().unwrap_or_default();
            self.bucket("source", &c.s3_bucket.clone(), &prefix);
            return;
        }
        if let SourceConnector::Stdin(_) = &self.pipeline.source.connector {
            // Opening it would start reading the doctor's own standard input.
            self.push(Check::warn(
                name,
                "`Stdin` is a push source: records read from the pipe and not yet committed to the WAL are lost if the process dies, and a later pass reads only what it is piped",
                "for data that must not be lost, write it to files and read them with the File source",
            ));
            return;
        }
        let opened = crate::pipeline::source::open_source(
            self.pipeline,
            &self.config.settings,
            &self.config.base_dir,
        );
        let check = match opened {
            Ok(_) => Check::ok(
                name,
                format!("`data_sources.{}` opens", self.pipeline.source.name),
            ),
            Err(e) => Check::fail(
                name,
                e.to_string(),
                format!(
                    "fix `data_sources.{}` (paths are relative to the config file's directory, {})",
                    self.pipeline.source.name,
                    self.config.base_dir.display()
                ),
            ),
        };
        self.push(check);
    }

    /// Whether files can be created in `dir` (or, when it does not exist yet, in its nearest
    /// existing ancestor, where sync creates it): a probe file is made and removed.
    fn writable(&mut self, part: &str, dir: &Path) {
        let name = self.name(part);
        let check = match nearest_existing(dir) {
            None => Check::fail(
                name,
                format!("no part of {} exists", dir.display()),
                "set DATA_DIR (or the pipeline's `data_dir`) to a directory on a local disk",
            ),
            Some(existing) => {
                let probe = existing.join(format!(".skipprd-doctor-{}", std::process::id()));
                match std::fs::write(&probe, b"") {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&probe);
                        Check::ok(name, format!("{} is writable", existing.display()))
                    }
                    Err(e) => Check::fail(
                        name,
                        format!("cannot create files in {}: {e}", existing.display()),
                        "set DATA_DIR (or the pipeline's `data_dir`) to a directory this user can write",
                    ),
                }
            }
        };
        self.push(check);
    }

    /// The embedded state store reads back: opened read-only, every item decoded.
    fn state_file(&mut self, path: &Path) {
        use crate::state::{EmbeddedCheck, EmbeddedStore};
        let name = self.name("state store");
        let check = match EmbeddedStore::verify(path) {
            Ok(EmbeddedCheck::Missing) => Check::ok(
                name,
                format!(
                    "{} does not exist yet (the first sync creates it)",
                    path.display()
                ),
            ),
            Ok(EmbeddedCheck::InUse) => Check::ok(
                name,
                format!("{} is open in a running sync (not read)", path.display()),
            ),
            Ok(EmbeddedCheck::Items(items)) => Check::ok(
                name,
                format!("{} reads back ({items} items)", path.display()),
            ),
            Err(e) => Check::fail(
                name,
                e.to_string(),
                format!(
                    "mv {0} {0}.damaged, then `skipprd sync` (as the message says)",
                    path.display()
                ),
            ),
        };
        self.push(check);
    }

    /// The disk WAL reads back: every segment and committed record checked, read-only (safe
    /// beside a running sync).
    fn disk_wal(&mut self, dir: &Path) {
        let name = self.name("WAL");
        let check = match crate::wal::DiskWal::open_read_only(dir) {
            Ok(wal) => Check::ok(
                name,
                format!(
                    "{} reads back ({} committed batch(es) not yet reclaimed)",
                    dir.display(),
                    wal.batches().len()
                ),
            ),
            Err(e) => Check::fail(
                name,
                e.to_string(),
                format!(
                    "`skipprd sync` and `skipprd reset` refuse a damaged WAL: move {0} aside (to {0}.damaged; it holds the batches not yet delivered), then `skipprd reset -p {1} --yes` starts a new WAL above every landed batch id; the next sync reads the source again from its start, so rows it still holds land again (docs/wal.md, \"A WAL that restarts\")",
                    dir.display(),
                    self.pipeline.name
                ),
            ),
        };
        self.push(check);
    }

    /// The sync's disk guard pauses reading below 5 GB free or at 90 % full.
    fn disk(&mut self, dir: &Path) {
        let name = self.name("disk");
        let Some(existing) = nearest_existing(dir) else {
            return;
        };
        let check = match fs4::statvfs(&existing) {
            Ok(stats) => {
                let used = crate::pipeline::sync::disk_used_fraction(
                    stats.total_space(),
                    stats.free_space(),
                    stats.available_space(),
                );
                let detail = format!(
                    "{:.1} GB free, {:.0} % used under {}",
                    stats.available_space() as f64 / 1e9,
                    used * 100.0,
                    existing.display()
                );
                if crate::pipeline::sync::disk_guard_pauses(stats.available_space(), used) {
                    Check::fail(
                        name,
                        detail,
                        "free space (sync pauses reading below 5 GB free or at 90 % used), or move DATA_DIR",
                    )
                } else {
                    Check::ok(name, detail)
                }
            }
            Err(e) => Check::warn(
                name,
                format!("cannot read the free space of {}: {e}", existing.display()),
                "check the directory",
            ),
        };
        self.push(check);
    }

    /// A one-key listing of `s3://{bucket}/{prefix}`.
    fn bucket(&mut self, part: &str, bucket: &str, prefix: &str) {
        let name = self.name(part);
        let Some(aws) = self.aws() else { return };
        let client = aws.s3(None);
        let listed = aws.block_on(
            client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .max_keys(1)
                .send(),
        );
        let check = match listed {
            Ok(_) => Check::ok(name, format!("s3://{bucket}/{prefix} answers")),
            Err(e) => {
                let failure = SdkFailure::from_sdk(&e);
                let fix = match failure.code.as_str() {
                    "NoSuchBucket" => format!("create the bucket `{bucket}` or fix its name"),
                    "AccessDenied" => format!(
                        "grant s3:ListBucket on arn:aws:s3:::{bucket} (and the object actions the docs/deploy.md policies list)"
                    ),
                    _ => "check AWS_REGION, the credentials and AWS_ENDPOINT_URL".to_owned(),
                };
                Check::fail(name, format!("s3://{bucket}/{prefix}: {failure}"), fix)
            }
        };
        self.push(check);
    }

    fn state_table(&mut self, table: &str) {
        let name = self.name("state table");
        let Some(aws) = self.aws() else { return };
        let check = match crate::state::DynamoStore::open(&aws, table) {
            Ok(_) => Check::ok(name, format!("DynamoDB table `{table}` is ready")),
            Err(e) => Check::fail(
                name,
                e.to_string(),
                "create it with `skipprd store create` (or the deployment's stack), or fix `skippr.store.name`",
            ),
        };
        self.push(check);
    }

    fn destination(&mut self) {
        let Some(destination) = &self.pipeline.destination else {
            let check = Check::ok(
                self.name("destination"),
                "none: the WAL is the dataset (`skipprd query` reads it)",
            );
            self.push(check);
            return;
        };
        let location = destination.location.clone();
        if let Some(dir) = location.warehouse_dir() {
            self.writable("warehouse", &dir);
        } else if let Some(rest) = location.warehouse.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            self.bucket("warehouse", bucket, prefix);
        }
        if let LakeCatalog::Glue { catalog_id, .. } = &location.catalog {
            self.glue_database(&location.namespace, catalog_id.clone());
        }
    }

    fn glue_database(&mut self, database: &str, catalog_id: Option<String>) {
        let name = self.name("Glue database");
        let Some(aws) = self.aws() else { return };
        let client = aws.glue();
        let got = aws.block_on(
            client
                .get_database()
                .set_catalog_id(catalog_id)
                .name(database)
                .send(),
        );
        let check = match got {
            Ok(_) => Check::ok(name, format!("`{database}` exists")),
            Err(e) => {
                let failure = SdkFailure::from_sdk(&e);
                if failure.code == "EntityNotFoundException" {
                    Check::warn(
                        name,
                        format!("`{database}` does not exist yet"),
                        "the first sync creates it (needs glue:CreateDatabase), or create it yourself",
                    )
                } else {
                    Check::fail(
                        name,
                        format!("`{database}`: {failure}"),
                        "grant glue:GetDatabase on the catalog and the database, and check AWS_REGION",
                    )
                }
            }
        };
        self.push(check);
    }
}

/// `dir` or its nearest ancestor that exists.
fn nearest_existing(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|p| p.exists()).map(Path::to_path_buf)
}
