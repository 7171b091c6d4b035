//! A pipeline's change stream (`cdc`, resolved against its Postgres source's keys) and its
//! write policies (checked against its destination). Pure: nothing here connects anywhere.

use std::time::Duration;

use super::{Named, Validator, WritePolicies};
use crate::config::connectors::{ConnectorSet as _, SinkConnector, SourceConnector};
use crate::config::{ConfigError, PipelineConfig, WritePolicy, WritePolicyConfig};

/// A Postgres source's change stream, resolved from the pipeline's `cdc` and the source's
/// keys (see `sources::postgres::cdc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCdc {
    /// `snapshot_then_cdc`: the tables are read once, at the slot's consistent point, before
    /// the stream; `false`: `cdc_only`.
    pub snapshot_first: bool,
    /// The logical replication slot (created when missing).
    pub slot_name: String,
    /// The publication (created for the tables when missing).
    pub publication: String,
    /// A pass ends once no change has come for this long.
    pub idle_timeout: Duration,
}

impl ResolvedCdc {
    /// Default `cdc_idle_timeout_seconds`.
    pub const DEFAULT_IDLE_TIMEOUT_SECONDS: u64 = 10;
}

/// `skipprd_{pipeline}` as a replication slot may be named: lower case, letters, digits and
/// `_` (anything else becomes `_`), at most 63 bytes.
pub fn default_cdc_name(pipeline: &str) -> String {
    let mut name: String = format!("skipprd_{pipeline}")
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(63);
    name
}

impl Validator<'_> {
    /// The write policies of pipeline `p` (keys at `at`), each checked against the destination
    /// `sink`: one that cannot apply a declared policy fails naming both. `partitioned`: the
    /// pipeline partitions its tables (`replace_partition` needs partitions to replace).
    pub(super) fn write_policies(
        &self,
        at: &dyn Fn(&str) -> String,
        p: &PipelineConfig,
        sink: Option<&Named<SinkConnector>>,
        partitioned: bool,
    ) -> Result<WritePolicies, ConfigError> {
        let mut policies = match &p.write_policy {
            None => WritePolicies::default(),
            Some(WritePolicyConfig::One(policy)) => WritePolicies {
                default: Some(*policy),
                ..WritePolicies::default()
            },
            Some(WritePolicyConfig::PerNamespace(map)) => WritePolicies {
                default: map.default,
                namespaces: map.namespaces.clone(),
                ..WritePolicies::default()
            },
        };
        if let Some(pk) = &p.primary_key {
            if pk.is_empty() || pk.iter().any(|c| c.trim().is_empty()) {
                return Err(self.bad_value(
                    &at("primary_key"),
                    "must name at least one column, none empty",
                ));
            }
            policies.primary_key = pk.clone();
        }
        for policy in policies.declared() {
            if policy == WritePolicy::Append {
                continue;
            }
            let destination = sink.map_or("no data_sink", |s| s.connector.type_name());
            let applies = matches!(
                (sink.map(|s| &s.connector), policy),
                (
                    Some(
                        SinkConnector::Duckdb(_)
                            | SinkConnector::SkipprLake(_)
                            | SinkConnector::AthenaIceberg(_)
                    ),
                    _
                ) | (
                    Some(SinkConnector::Postgres(_)),
                    WritePolicy::MergeByKey | WritePolicy::ReplaceTable
                )
            );
            if !applies {
                return Err(self.bad_value(
                    &at("write_policy"),
                    &format!(
                        "`{}` cannot be applied by the `{destination}` destination (`Duckdb`, `SkipprLake` and `AthenaIceberg` apply every policy; `Postgres` `append`, `merge_by_key` and `replace_table`; every other destination `append`)",
                        policy.name()
                    ),
                ));
            }
            if policy == WritePolicy::ReplacePartition && !partitioned {
                return Err(self.bad_value(
                    &at("write_policy"),
                    &format!(
                        "`replace_partition` replaces the partitions a read's rows fall in, and the `{destination}` destination's tables have none here: set `transform.batch_partition_fields` or `transform.batch_time_fields`, or use `replace_table`"
                    ),
                ));
            }
            if policy == WritePolicy::MergeByKey && policies.primary_key.is_empty() {
                return Err(self.bad_value(
                    &at("primary_key"),
                    "is required by `write_policy: merge_by_key` (the columns rows are merged on)",
                ));
            }
        }
        Ok(policies)
    }
}

impl Validator<'_> {
    /// A pipeline's change stream: its `cdc` (only a source that can capture changes takes
    /// it) over the Postgres source's `cdc_mode`, `replication_slot_name` and
    /// `publication_name`; the slot and publication default to `skipprd_{pipeline}`.
    pub(super) fn cdc(
        &self,
        path: &str,
        pipeline: &str,
        cdc: Option<&crate::config::CdcSetting>,
        source: &Named<SourceConnector>,
    ) -> Result<Option<ResolvedCdc>, ConfigError> {
        let SourceConnector::Postgres(c) = &source.connector else {
            if cdc.is_some() {
                return Err(self.bad_value(
                    path,
                    &format!(
                        "`data_sources.{}` is a `{}` source, which cannot capture changes; `cdc` is for a Postgres source",
                        source.name,
                        source.connector.type_name()
                    ),
                ));
            }
            return Ok(None);
        };
        use crate::config::connectors::CdcMode as SourceMode;
        let (slot, publication) = match cdc {
            Some(crate::config::CdcSetting::Options(o)) => {
                (o.slot_name.clone(), o.publication.clone())
            }
            _ => (None, None),
        };
        let stream = match cdc.map(crate::config::CdcSetting::mode) {
            Some(crate::config::CdcMode::Snapshot) => None,
            Some(crate::config::CdcMode::SnapshotThenCdc) => Some(true),
            Some(crate::config::CdcMode::CdcOnly) => Some(false),
            None => match c.cdc_mode {
                None | Some(SourceMode::Snapshot) => None,
                Some(SourceMode::SnapshotThenCdc) => Some(true),
                Some(SourceMode::CdcOnly) => Some(false),
            },
        };
        let Some(snapshot_first) = stream else {
            return Ok(None);
        };
        let source_key = |key: &str| format!("data_sources.{}.Postgres.{key}", source.name);
        if c.query.is_some() {
            return Err(self.bad_value(
                &source_key("query"),
                "a custom query cannot be streamed by CDC: name the `tables` instead",
            ));
        }
        if let Some(index) = c
            .tables
            .iter()
            .position(|t| t.config().cursor_field.is_some())
        {
            return Err(self.bad_value(
                &source_key(&format!("tables[{index}].cursor_field")),
                "is for `cdc_mode: snapshot`; the change stream reads every change without a cursor",
            ));
        }
        let default_name = || default_cdc_name(pipeline);
        let (slot_name, slot_path) = match (slot, &c.replication_slot_name) {
            (Some(s), _) => (s, format!("{path}.slot_name")),
            (None, Some(s)) => (s.clone(), source_key("replication_slot_name")),
            (None, None) => (default_name(), String::new()),
        };
        if slot_name.is_empty()
            || slot_name.len() > 63
            || !slot_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(self.bad_value(
                &slot_path,
                "a replication slot name is 1-63 lower-case letters, digits and underscores",
            ));
        }
        let (publication, publication_path) = match (publication, &c.publication_name) {
            (Some(p), _) => (p, format!("{path}.publication")),
            (None, Some(p)) => (p.clone(), source_key("publication_name")),
            (None, None) => (default_name(), String::new()),
        };
        if publication.trim().is_empty() || publication.len() > 63 {
            return Err(self.bad_value(&publication_path, "a publication name is 1-63 bytes"));
        }
        Ok(Some(ResolvedCdc {
            snapshot_first,
            slot_name,
            publication,
            idle_timeout: Duration::from_secs(
                c.cdc_idle_timeout_seconds
                    .unwrap_or(ResolvedCdc::DEFAULT_IDLE_TIMEOUT_SECONDS),
            ),
        }))
    }
}
