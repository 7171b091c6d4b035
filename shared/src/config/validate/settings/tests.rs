//! The settings' precedence (flag, key, variable, default) and the environment variables of
//! the real product.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::load_file;
use crate::config::validate::{Overrides, StoreKind, ValidatedConfig, validate_with};
use crate::config::{ConfigError, StorageMode};

const BASE: &str = "\
pipelines:
  p:
    data_source: data_sources.s
data_sources:
  s:
    File:
      path: in.jsonl
";

fn validated(
    skippr: &str,
    vars: &[(&str, &str)],
    overrides: &Overrides,
) -> Result<ValidatedConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skippr.yml");
    std::fs::write(&path, format!("{skippr}{BASE}")).unwrap();
    let env: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let loaded = load_file(&path, env).unwrap();
    validate_with(&loaded, overrides)
}

fn flags() -> Overrides {
    Overrides {
        workspace: Some("from_flag".into()),
        tenant: Some("tenant_flag".into()),
        skippr_s3_bucket: Some("flag-meta".into()),
        wal_s3_bucket: Some("flag-wal".into()),
        storage_mode: Some("local".into()),
        store_type: Some("dynamodb".into()),
        store_name: Some("flag-table".into()),
        wal_storage: None,
    }
}

const KEYS: &str = "\
skippr:
  workspace: from_key
  tenant: tenant_key
  skippr_s3_bucket: key-meta
  wal_s3_bucket: key-wal
  skipprd_el_storage_mode: s3
  store: {type: sled}
";

const VARS: &[(&str, &str)] = &[
    ("WORKSPACE_NAME", "from_var"),
    ("TENANT", "tenant_var"),
    ("SKIPPR_S3_BUCKET", "var-meta"),
    ("SKIPPR_WAL_S3_BUCKET", "var-wal"),
    ("SKIPPRD_EL_STORAGE_MODE", "s3"),
    ("SKIPPR_STORE_TYPE", "dynamodb"),
    ("SKIPPR_STORE_NAME", "var-table"),
];

#[test]
fn a_flag_wins_over_its_key_and_a_key_over_its_variable() {
    let s = validated(KEYS, VARS, &flags()).unwrap().settings;
    assert_eq!(
        (s.workspace.as_str(), s.tenant.as_str()),
        ("from_flag", "tenant_flag")
    );
    assert_eq!(s.skippr_s3_bucket.as_deref(), Some("flag-meta"));
    assert_eq!(s.wal_s3_bucket.as_deref(), Some("flag-wal"));
    assert_eq!(s.storage_mode, StorageMode::Local);
    assert_eq!(
        s.store,
        StoreKind::Dynamodb {
            table: "flag-table".into()
        }
    );

    let s = validated(KEYS, VARS, &Overrides::default())
        .unwrap()
        .settings;
    assert_eq!(
        (s.workspace.as_str(), s.tenant.as_str()),
        ("from_key", "tenant_key")
    );
    assert_eq!(s.skippr_s3_bucket.as_deref(), Some("key-meta"));
    assert_eq!(s.wal_s3_bucket.as_deref(), Some("key-wal"));
    assert_eq!(s.storage_mode, StorageMode::S3);
    assert_eq!(
        s.store,
        StoreKind::Embedded,
        "the key's `sled` wins over the variable"
    );

    let s = validated("", VARS, &Overrides::default()).unwrap().settings;
    assert_eq!(
        (s.workspace.as_str(), s.tenant.as_str()),
        ("from_var", "tenant_var")
    );
    assert_eq!(s.skippr_s3_bucket.as_deref(), Some("var-meta"));
    assert_eq!(
        s.store,
        StoreKind::Dynamodb {
            table: "var-table".into()
        }
    );

    let s = validated("", &[], &Overrides::default()).unwrap().settings;
    assert_eq!(
        (s.workspace.as_str(), s.store),
        ("default", StoreKind::Embedded)
    );
    assert!(s.schema_auto_approve && !s.reset_offsets);
    assert_eq!(s.wal_bytes_per_file, None);
}

#[test]
fn a_bad_flag_value_is_refused_naming_the_flag() {
    let bad = |overrides: Overrides, name: &str| {
        let e = validated("", &[], &overrides).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
    };
    bad(
        Overrides {
            workspace: Some("no spaces".into()),
            ..Overrides::default()
        },
        "--workspace",
    );
    bad(
        Overrides {
            storage_mode: Some("cloud".into()),
            ..Overrides::default()
        },
        "--storage-mode",
    );
    bad(
        Overrides {
            store_type: Some("redis".into()),
            ..Overrides::default()
        },
        "--store-type",
    );
    bad(
        Overrides {
            wal_s3_bucket: Some("s3://b/p".into()),
            ..Overrides::default()
        },
        "--wal-s3-bucket",
    );
    // DynamoDB without a table name names every way to give one.
    let e = validated(
        "",
        &[],
        &Overrides {
            store_type: Some("dynamodb".into()),
            ..Overrides::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("skippr.store.name")
            && e.contains("SKIPPR_STORE_NAME")
            && e.contains("--store-name"),
        "{e}"
    );
}

#[test]
fn sync_frequency_is_the_default_of_pipelines_that_set_none() {
    let frequency = |vars: &[(&str, &str)], key: &str| {
        let text = if key.is_empty() {
            String::new()
        } else {
            key.to_owned()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skippr.yml");
        std::fs::write(
            &path,
            BASE.replace("    data_source:", &format!("{text}    data_source:")),
        )
        .unwrap();
        let env: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        validate_with(&load_file(&path, env).unwrap(), &Overrides::default())
            .map(|c| c.pipeline(None).unwrap().sync_frequency)
    };
    assert_eq!(frequency(&[], "").unwrap(), Duration::from_secs(900));
    for (value, seconds) in [
        ("90", 90),
        ("90s", 90),
        ("2m", 120),
        ("1h", 3600),
        (" 15 min ", 900),
    ] {
        assert_eq!(
            frequency(&[("SYNC_FREQUENCY", value)], "").unwrap(),
            Duration::from_secs(seconds),
            "{value}"
        );
    }
    assert_eq!(
        frequency(
            &[("SYNC_FREQUENCY", "2m")],
            "    sync_frequency_seconds: 7\n"
        )
        .unwrap(),
        Duration::from_secs(7),
        "the pipeline's key wins"
    );
    for bad in ["soon", "0", "-5", "5 fortnights"] {
        let e = frequency(&[("SYNC_FREQUENCY", bad)], "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SYNC_FREQUENCY"), "{bad}: {e}");
    }
}

#[test]
fn the_real_products_environment_variables_are_read_and_checked() {
    let settings =
        |vars: &[(&str, &str)]| validated("", vars, &Overrides::default()).map(|c| c.settings);
    let s = settings(&[
        ("WAL_BYTES_PER_FILE", "8388608"),
        ("SCHEMA_AUTO_APPROVE", "false"),
        ("RESET_OFFSETS", "TRUE"),
        ("RESET_METADATA", "yes"),
        ("WAL_MAX_DELAY_SECONDS", "30"),
    ])
    .unwrap();
    assert_eq!(s.wal_bytes_per_file, Some(8_388_608));
    assert!(!s.schema_auto_approve);
    assert!(s.reset_offsets);
    assert!(s.reset_metadata);
    assert_eq!(s.wal_max_delay, Some(std::time::Duration::from_secs(30)));
    let unset = settings(&[]).unwrap();
    assert!(!unset.reset_metadata);
    assert_eq!(unset.wal_max_delay, None);
    assert!(
        settings(&[("SCHEMA_AUTO_APPROVE", "yes")])
            .unwrap()
            .schema_auto_approve
    );
    for (var, bad) in [
        ("WAL_BYTES_PER_FILE", "lots"),
        ("WAL_BYTES_PER_FILE", "0"),
        ("SCHEMA_AUTO_APPROVE", "maybe"),
        ("RESET_OFFSETS", "please"),
        ("RESET_METADATA", "sometimes"),
        ("WAL_MAX_DELAY_SECONDS", "0"),
        ("WAL_MAX_DELAY_SECONDS", "soon"),
    ] {
        let e = settings(&[(var, bad)]).unwrap_err().to_string();
        assert!(e.contains(var) && e.contains(bad), "{var}={bad}: {e}");
    }
}

#[test]
fn chaos_mode_is_set_per_pipeline_or_for_the_project() {
    let chaos = |skippr: &str, pipeline: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skippr.yml");
        let text = format!(
            "{skippr}{}",
            BASE.replace("    data_source:", &format!("{pipeline}    data_source:"))
        );
        std::fs::write(&path, text).unwrap();
        let loaded = load_file(&path, BTreeMap::new()).unwrap();
        validate_with(&loaded, &Overrides::default())
            .unwrap()
            .pipeline(None)
            .unwrap()
            .chaos_mode
    };
    assert!(!chaos("", ""));
    assert!(chaos("", "    chaos_mode: true\n"));
    assert!(chaos("skippr:\n  chaos_mode: true\n", ""));
    assert!(!chaos(
        "skippr:\n  chaos_mode: true\n",
        "    chaos_mode: false\n"
    ));
}

#[test]
fn batch_sizes_by_bytes_and_seconds_are_accepted_on_file_and_s3_sources() {
    let source = |kind: &str, keys: &str, vars: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skippr.yml");
        let body = match kind {
            "File" => "      path: in.jsonl\n",
            _ => "      s3_bucket: b\n",
        };
        std::fs::write(
            &path,
            format!(
                "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    {kind}:\n{body}{keys}"
            ),
        )
        .unwrap();
        let env: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        validate_with(&load_file(&path, env).unwrap(), &Overrides::default())
    };
    for kind in ["File", "S3"] {
        let keys = "      batch_size_bytes: 1000000\n      batch_size_seconds: 5\n";
        assert!(source(kind, keys, &[]).is_ok(), "{kind}");
        for key in ["batch_size_bytes", "batch_size_seconds", "batch_size"] {
            let e = source(kind, &format!("      {key}: 0\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("data_sources.s.{kind}.{key}")), "{e}");
        }
    }
    let s = source("File", "", &[("BUFFER_THRESHOLD_SECONDS", "7")]).unwrap();
    assert_eq!(s.settings.buffer_threshold_seconds, Duration::from_secs(7));
    let s = source("File", "", &[]).unwrap();
    assert_eq!(s.settings.buffer_threshold_seconds, Duration::from_secs(60));
    let e = source("File", "", &[("BUFFER_THRESHOLD_SECONDS", "soon")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("BUFFER_THRESHOLD_SECONDS"), "{e}");
}

#[test]
fn wal_compression_is_lz4_or_none_and_none_only_on_a_disk_wal() {
    use crate::wal::WalCompression;
    let settings =
        |vars: &[(&str, &str)]| validated("", vars, &Overrides::default()).map(|c| c.settings);
    assert_eq!(settings(&[]).unwrap().wal_compression, None);
    // Resolved per pipeline: this one has no destination, so its WAL keeps lz4 unless told.
    let pipeline = |vars: &[(&str, &str)]| {
        validated("", vars, &Overrides::default())
            .unwrap()
            .pipelines["p"]
            .wal_compression
    };
    assert_eq!(pipeline(&[]), WalCompression::Lz4);
    assert_eq!(
        pipeline(&[("WAL_COMPRESSION", "none")]),
        WalCompression::None
    );
    for (value, expected) in [
        ("lz4", WalCompression::Lz4),
        ("none", WalCompression::None),
        (" NONE ", WalCompression::None),
    ] {
        let s = settings(&[("WAL_COMPRESSION", value)]).unwrap();
        assert_eq!(s.wal_compression, Some(expected), "{value}");
    }
    let e = settings(&[("WAL_COMPRESSION", "zstd")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("WAL_COMPRESSION") && e.contains("zstd"), "{e}");
    let s3 = [("WAL_STORAGE", "s3"), ("SKIPPR_S3_BUCKET", "b")];
    let lz4 = settings(&[s3[0], s3[1], ("WAL_COMPRESSION", "lz4")]).unwrap();
    assert_eq!(lz4.wal_compression, Some(WalCompression::Lz4));
    let e = settings(&[s3[0], s3[1], ("WAL_COMPRESSION", "none")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("WAL_COMPRESSION") && e.contains("S3 WAL"), "{e}");
}

/// Unset, a disk WAL is left uncompressed under any destination (its batches are delivered
/// and reclaimed), whatever its kind.
#[test]
fn wal_compression_is_none_under_every_kind_of_destination() {
    for sink in [
        "Duckdb:\n      warehouse: file:///tmp/lake\n      table_namespace: t",
        "File:\n      path: out",
        "Postgres:\n      host: h\n      user: u\n      database: d\n      schema: public",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skippr.yml");
        let yaml = format!(
            "pipelines:\n  p:\n    data_source: data_sources.s\n    data_sink: data_sinks.d\n\
             data_sources:\n  s:\n    File:\n      path: in.jsonl\n\
             data_sinks:\n  d:\n    {sink}\n"
        );
        std::fs::write(&path, yaml).unwrap();
        let loaded = load_file(&path, BTreeMap::new()).unwrap();
        let config = validate_with(&loaded, &Overrides::default()).unwrap();
        assert_eq!(
            config.pipelines["p"].wal_compression,
            crate::wal::WalCompression::None,
            "{sink}"
        );
    }
}
