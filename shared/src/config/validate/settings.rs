//! The project-wide settings (`skippr:` keys, their environment variables and the CLI's
//! global flags): a flag wins over its key, a key over its variable, and the default comes
//! last ([`Overrides`] holds the flags).

use super::{
    ConfigError, DEFAULT_BUFFER_THRESHOLD_BYTES, DEFAULT_DELIVER_THRESHOLD_BYTES,
    DEFAULT_SYNC_FREQUENCY_SECONDS, Origin, Overrides, Settings, StorageMode, StoreKind, StoreType,
    Validator, WalStorage,
};

impl Validator<'_> {
    /// A setting from the file (`key`), else from environment variable `var`, with its origin.
    pub(super) fn setting(
        &self,
        from_file: Option<&String>,
        key: &str,
        var: &str,
    ) -> Option<(String, Origin)> {
        match from_file {
            Some(v) => Some((v.clone(), Origin::Key(key.to_owned()))),
            None => self.var(var).map(|v| (v, Origin::Var(var.to_owned()))),
        }
    }

    /// [`Validator::setting`] with a command-line flag over both.
    pub(super) fn setting_or_flag(
        &self,
        flag: Option<(&String, &str)>,
        from_file: Option<&String>,
        key: &str,
        var: &str,
    ) -> Option<(String, Origin)> {
        match flag {
            Some((value, name)) => Some((value.clone(), Origin::Var(name.to_owned()))),
            None => self.setting(from_file, key, var),
        }
    }

    /// `SYNC_FREQUENCY`: the time between passes of a pipeline that sets none (whole seconds,
    /// or with a unit: `90s`, `15m`, `1h`); unset: [`DEFAULT_SYNC_FREQUENCY_SECONDS`].
    pub(super) fn sync_frequency_default(&self) -> Result<u64, ConfigError> {
        let Some(v) = self.var("SYNC_FREQUENCY") else {
            return Ok(DEFAULT_SYNC_FREQUENCY_SECONDS);
        };
        let text = v.trim().to_ascii_lowercase();
        let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
            Some(at) => text.split_at(at),
            None => (text.as_str(), "s"),
        };
        let scale = match unit.trim() {
            "s" | "sec" | "secs" | "seconds" => Some(1),
            "m" | "min" | "mins" | "minutes" => Some(60),
            "h" | "hour" | "hours" => Some(3600),
            _ => None,
        };
        digits
            .parse::<u64>()
            .ok()
            .zip(scale)
            .and_then(|(n, scale)| n.checked_mul(scale))
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                self.invalid(
                    &Origin::Var("SYNC_FREQUENCY".to_owned()),
                    &v,
                    "is not a positive duration (seconds, or `90s`, `15m`, `1h`)",
                )
            })
    }

    /// A yes/no environment variable: `true|yes|1|on` or `false|no|0|off`, any case.
    pub(super) fn yes_no(&self, var: &str) -> Result<Option<bool>, ConfigError> {
        let Some(v) = self.var(var) else {
            return Ok(None);
        };
        match v.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Ok(Some(true)),
            "false" | "no" | "0" | "off" => Ok(Some(false)),
            _ => Err(self.invalid(
                &Origin::Var(var.to_owned()),
                &v,
                "is not a yes/no value; use `true` or `false`",
            )),
        }
    }

    /// An error about `value`, reported where it came from: a key of the file, or a variable
    /// or flag.
    pub(super) fn invalid(&self, origin: &Origin, value: &str, message: &str) -> ConfigError {
        match origin {
            Origin::Key(key) => self.bad_value(key, &format!("'{value}' {message}")),
            Origin::Var(name) => ConfigError::BadSetting {
                name: name.clone(),
                value: value.to_owned(),
                message: message.to_owned(),
            },
        }
    }

    pub(super) fn settings(
        &self,
        config: &crate::config::Config,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let s = &config.skippr;
        let wal_flag = overrides.wal_storage.as_deref();
        fn flag<'a>(
            value: &'a Option<String>,
            name: &'static str,
        ) -> Option<(&'a String, &'a str)> {
            value.as_ref().map(|v| (v, name))
        }
        let identity = |flag: Option<(&String, &str)>,
                        value: Option<&String>,
                        key: &str,
                        var: &str|
         -> Result<String, ConfigError> {
            match self.setting_or_flag(flag, value, key, var) {
                None => Ok("default".to_owned()),
                Some((v, origin)) => {
                    if v.is_empty()
                        || !v
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        return Err(self.invalid(
                            &origin,
                            &v,
                            "may only contain letters, digits, `_` and `-`",
                        ));
                    }
                    Ok(v)
                }
            }
        };
        let tenant = identity(
            flag(&overrides.tenant, "--tenant"),
            s.tenant.as_ref(),
            "skippr.tenant",
            "TENANT",
        )?;
        let workspace = identity(
            flag(&overrides.workspace, "--workspace"),
            s.workspace.as_ref(),
            "skippr.workspace",
            "WORKSPACE_NAME",
        )?;
        let bucket = |flag: Option<(&String, &str)>,
                      value: Option<&String>,
                      key: &str,
                      var: &str|
         -> Result<Option<String>, ConfigError> {
            match self.setting_or_flag(flag, value, key, var) {
                None => Ok(None),
                Some((b, origin)) => {
                    if b.contains("://") || b.contains('/') {
                        return Err(self.invalid(
                            &origin,
                            &b,
                            "must be a bucket name, not a URI or path",
                        ));
                    }
                    Ok(Some(b))
                }
            }
        };
        let skippr_s3_bucket = bucket(
            flag(&overrides.skippr_s3_bucket, "--skippr-s3-bucket"),
            s.skippr_s3_bucket.as_ref(),
            "skippr.skippr_s3_bucket",
            "SKIPPR_S3_BUCKET",
        )?;
        let wal_s3_bucket = bucket(
            flag(&overrides.wal_s3_bucket, "--wal-s3-bucket"),
            s.wal_s3_bucket.as_ref(),
            "skippr.wal_s3_bucket",
            "SKIPPR_WAL_S3_BUCKET",
        )?;
        let mode_flag = overrides
            .storage_mode
            .as_ref()
            .map(|v| (v.clone(), "--storage-mode"));
        let mode_text = match (mode_flag, s.skipprd_el_storage_mode) {
            (Some(flag), _) => Some(flag),
            (None, Some(_)) => None,
            (None, None) => self
                .var("SKIPPRD_EL_STORAGE_MODE")
                .map(|v| (v, "SKIPPRD_EL_STORAGE_MODE")),
        };
        let storage_mode = match (mode_text, s.skipprd_el_storage_mode) {
            (Some((v, name)), _) => match v.to_ascii_lowercase().as_str() {
                "local" => StorageMode::Local,
                "s3" => StorageMode::S3,
                _ => {
                    return Err(self.invalid(
                        &Origin::Var(name.to_owned()),
                        &v,
                        "is not a storage mode; use `local` or `s3`",
                    ));
                }
            },
            (None, Some(mode)) => mode,
            (None, None) if skippr_s3_bucket.is_some() => StorageMode::S3,
            (None, None) => StorageMode::Local,
        };
        if storage_mode == StorageMode::S3 && skippr_s3_bucket.is_none() {
            return Err(self.bad_value(
                "skippr.skipprd_el_storage_mode",
                "is `s3`, but no skippr bucket is set (skippr.skippr_s3_bucket or SKIPPR_S3_BUCKET)",
            ));
        }
        let store = self.store(s.store.as_ref(), overrides)?;
        let chaos_mode = s.chaos_mode.unwrap_or_else(|| {
            matches!(
                self.var("SKIPPR_CHAOS_MODE")
                    .as_deref()
                    .map(str::to_ascii_lowercase)
                    .as_deref(),
                Some("yes" | "true" | "1")
            )
        });
        let wal = match wal_flag {
            Some(v) => Some((v.to_owned(), "--wal-storage")),
            None => self.var("WAL_STORAGE").map(|v| (v, "WAL_STORAGE")),
        };
        let wal_storage = match &wal {
            None => WalStorage::Disk,
            Some((v, name)) => match v.to_ascii_lowercase().as_str() {
                "disk" => WalStorage::Disk,
                "s3" => WalStorage::S3,
                "clustered" => {
                    return Err(ConfigError::UnsupportedSetting {
                        setting: (*name).to_owned(),
                        value: v.clone(),
                        note: Some("use `disk` (default) or `s3`".to_owned()),
                    });
                }
                _ => {
                    return Err(self.invalid(
                        &Origin::Var((*name).to_owned()),
                        v,
                        "is not a WAL storage; use `disk` (default) or `s3`",
                    ));
                }
            },
        };
        if wal_storage == WalStorage::S3 && wal_s3_bucket.is_none() && skippr_s3_bucket.is_none() {
            return Err(self.no_wal_bucket(wal_flag));
        }
        let buffer_threshold_bytes =
            self.positive_bytes("BUFFER_THRESHOLD_BYTES", DEFAULT_BUFFER_THRESHOLD_BYTES)?;
        let deliver_threshold_bytes =
            self.positive_bytes("DELIVER_THRESHOLD_BYTES", DEFAULT_DELIVER_THRESHOLD_BYTES)?;
        let lease_ttl = match self.var("SKIPPR_LEASE_TTL_SECONDS") {
            None => crate::state::DEFAULT_LEASE_TTL,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(std::time::Duration::from_secs)
                .ok_or_else(|| {
                    self.invalid(
                        &Origin::Var("SKIPPR_LEASE_TTL_SECONDS".to_owned()),
                        &v,
                        "is not a positive whole number of seconds",
                    )
                })?,
        };
        let wal_bytes_per_file = match self.var("WAL_BYTES_PER_FILE") {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= crate::wal::WalOptions::MIN_SEGMENT_TARGET_BYTES)
                    .ok_or_else(|| {
                        self.invalid(
                            &Origin::Var("WAL_BYTES_PER_FILE".to_owned()),
                            &v,
                            &format!(
                                "is not a number of bytes of at least {}",
                                crate::wal::WalOptions::MIN_SEGMENT_TARGET_BYTES
                            ),
                        )
                    })?,
            ),
        };
        let wal_compression = match self.var("WAL_COMPRESSION") {
            None => None,
            Some(v) => {
                let compression = match v.trim().to_ascii_lowercase().as_str() {
                    "lz4" => crate::wal::WalCompression::Lz4,
                    "none" => crate::wal::WalCompression::None,
                    _ => {
                        return Err(self.invalid(
                            &Origin::Var("WAL_COMPRESSION".to_owned()),
                            &v,
                            "is not a WAL compression; use `lz4` or `none`",
                        ));
                    }
                };
                if wal_storage == WalStorage::S3 && compression == crate::wal::WalCompression::None
                {
                    return Err(ConfigError::UnsupportedSetting {
                        setting: "WAL_COMPRESSION".to_owned(),
                        value: v.clone(),
                        note: Some(
                            "the S3 WAL always compresses its batches (lz4): unset it, or use `lz4`"
                                .to_owned(),
                        ),
                    });
                }
                Some(compression)
            }
        };
        let buffer_threshold_seconds = std::time::Duration::from_secs(
            self.positive_bytes_or_seconds("BUFFER_THRESHOLD_SECONDS", 60, "seconds")?,
        );
        let schema_auto_approve = self.yes_no("SCHEMA_AUTO_APPROVE")?.unwrap_or(true);
        let reset_offsets = self.yes_no("RESET_OFFSETS")?.unwrap_or(false);
        let reset_metadata = self.yes_no("RESET_METADATA")?.unwrap_or(false);
        let wal_max_delay = match self.var("WAL_MAX_DELAY_SECONDS") {
            None => None,
            Some(_) => Some(std::time::Duration::from_secs(
                self.positive_bytes_or_seconds("WAL_MAX_DELAY_SECONDS", 1, "seconds")?,
            )),
        };
        Ok(Settings {
            tenant,
            workspace,
            storage_mode,
            skippr_s3_bucket,
            wal_s3_bucket,
            store,
            chaos_mode,
            wal_storage,
            buffer_threshold_bytes,
            deliver_threshold_bytes,
            lease_ttl,
            buffer_threshold_seconds,
            wal_bytes_per_file,
            wal_compression,
            schema_auto_approve,
            reset_offsets,
            reset_metadata,
            wal_max_delay,
        })
    }

    /// The state store: `--store-type`/`--store-name` over `skippr.store.type`/`name` over
    /// `SKIPPR_STORE_TYPE`/`SKIPPR_STORE_NAME`; none of them: the embedded store.
    pub(super) fn store(
        &self,
        store: Option<&crate::config::StoreConfig>,
        overrides: &Overrides,
    ) -> Result<StoreKind, ConfigError> {
        let type_from_file = store.map(|s| s.store_type);
        let store_type = match (&overrides.store_type, type_from_file) {
            (Some(v), _) => Some(self.store_type(v, "--store-type")?),
            (None, Some(t)) => Some(t),
            (None, None) => match self.var("SKIPPR_STORE_TYPE") {
                Some(v) => Some(self.store_type(&v, "SKIPPR_STORE_TYPE")?),
                None => None,
            },
        };
        let name = self
            .setting_or_flag(
                overrides.store_name.as_ref().map(|v| (v, "--store-name")),
                store.and_then(|s| s.name.as_ref()),
                "skippr.store.name",
                "SKIPPR_STORE_NAME",
            )
            .map(|(v, _)| v)
            .filter(|v| !v.trim().is_empty());
        match store_type {
            None | Some(StoreType::Sled) => Ok(StoreKind::Embedded),
            Some(StoreType::Dynamodb) => Ok(StoreKind::Dynamodb {
                table: name.ok_or_else(|| {
                    self.bad_value(
                        "skippr.store.name",
                        "is required when the store type is `dynamodb` (skippr.store.name, SKIPPR_STORE_NAME or --store-name)",
                    )
                })?,
            }),
            Some(StoreType::CloudTables) => Err(ConfigError::UnsupportedSetting {
                setting: "skippr.store.type".to_owned(),
                value: "cloud-tables".to_owned(),
                note: Some("use `sled` (embedded, the default) or `dynamodb`".to_owned()),
            }),
        }
    }

    /// A store type given as text (a flag or variable).
    pub(super) fn store_type(&self, value: &str, name: &str) -> Result<StoreType, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "sled" | "embedded" | "local" => Ok(StoreType::Sled),
            "dynamodb" => Ok(StoreType::Dynamodb),
            "cloud-tables" => Ok(StoreType::CloudTables),
            _ => Err(self.invalid(
                &Origin::Var(name.to_owned()),
                value,
                "is not a store type; use `sled` (embedded) or `dynamodb`",
            )),
        }
    }

    /// `WAL_STORAGE=s3` (or `--wal-storage s3`, when `wal_flag` is given) without a bucket.
    pub(super) fn no_wal_bucket(&self, wal_flag: Option<&str>) -> ConfigError {
        let origin = match wal_flag {
            Some(_) => "--wal-storage",
            None => "WAL_STORAGE",
        };
        self.bad_value(
            "skippr.wal_s3_bucket",
            &format!(
                "is required when {origin} is `s3`: set skippr.wal_s3_bucket (SKIPPR_WAL_S3_BUCKET), or skippr.skippr_s3_bucket (SKIPPR_S3_BUCKET) for both"
            ),
        )
    }

    /// A byte count from the environment variable `var`, or `default` when it is unset.
    pub(super) fn positive_bytes(&self, var: &str, default: u64) -> Result<u64, ConfigError> {
        self.positive_bytes_or_seconds(var, default, "bytes")
    }

    /// A positive whole number of `unit` from the environment variable `var`, or `default`
    /// when it is unset.
    pub(super) fn positive_bytes_or_seconds(
        &self,
        var: &str,
        default: u64,
        unit: &str,
    ) -> Result<u64, ConfigError> {
        match self.var(var) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    self.invalid(
                        &Origin::Var(var.to_owned()),
                        &v,
                        &format!("is not a positive number of {unit}"),
                    )
                }),
        }
    }
}

#[cfg(test)]
mod tests;
