//! Tests of validation's resolved values: the destination (lake location, maintenance,
//! layout), the WAL location, the store partition and the AWS settings, and the key each
//! error names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::destination::resolve_sink;
use super::*;
use crate::config::connectors::{DuckdbSinkConfig, SinkConnector};
use crate::config::load::load_file;

/// The location validation resolves for `sink` (its error names the key at fault).
fn lake_location(
    sink: &Named<SinkConnector>,
    base_dir: &Path,
    store: &StoreKind,
) -> Result<Option<LakeLocation>, ConfigError> {
    let env = BTreeMap::<String, String>::new();
    let v = Validator {
        file: Path::new("skippr.yml"),
        env: &env,
        base_dir,
    };
    resolve_sink(&sink.connector, base_dir, store)
        .map(|resolved| resolved.map(|(_, location)| location))
        .map_err(|e| v.sink_error(&sink.name, &sink.connector, e))
}

fn duckdb(warehouse: &str, ns: Option<&str>) -> Named<SinkConnector> {
    Named {
        name: "lake".into(),
        connector: SinkConnector::Duckdb(DuckdbSinkConfig {
            version: None,
            warehouse: warehouse.into(),
            table_namespace: ns.map(str::to_owned),
            auto_maintenance: None,
            snapshot_retain_last: None,
            snapshot_max_age_minutes: None,
            compact_target_file_mb: None,
            compact_min_files: None,
            orphan_min_age_minutes: None,
            metadata_retain_versions: None,
        }),
    }
}

#[test]
fn relative_warehouses_resolve_against_the_config_dir() -> Result<(), ConfigError> {
    let loc = lake_location(
        &duckdb("file://./lake/../wh", None),
        Path::new("/p"),
        &StoreKind::Embedded,
    )?;
    assert_eq!(
        loc,
        Some(LakeLocation {
            warehouse: "file:///p/wh".into(),
            namespace: "default".into(),
            catalog: LakeCatalog::Hadoop,
        })
    );
    let loc = lake_location(
        &duckdb("file:///abs/wh", Some("ns_1")),
        Path::new("/p"),
        &StoreKind::Embedded,
    )?;
    assert_eq!(
        loc.and_then(|l| l.warehouse_dir()),
        Some(PathBuf::from("/abs/wh"))
    );
    Ok(())
}

#[test]
fn bad_warehouses_and_namespaces_are_named() {
    let err = lake_location(
        &duckdb("s3://b/x", None),
        Path::new("/p"),
        &StoreKind::Embedded,
    )
    .map(|_| ());
    assert!(
        matches!(err, Err(ConfigError::BadValue { ref message, .. }) if message.contains("file://"))
    );
    let err = lake_location(
        &duckdb("file://./x", Some("a/b")),
        Path::new("/p"),
        &StoreKind::Embedded,
    )
    .map(|_| ());
    assert!(
        matches!(err, Err(ConfigError::BadValue { ref message, .. }) if message.contains("a/b"))
    );
}

fn athena(warehouse: &str, database: &str) -> Named<SinkConnector> {
    Named {
        name: "lake".into(),
        connector: SinkConnector::AthenaIceberg(
            crate::config::connectors::AthenaIcebergSinkConfig {
                version: None,
                warehouse: warehouse.into(),
                glue_database_name: database.into(),
                athena_workgroup_name: None,
                athena_results_s3_bucket: None,
                region: Some("eu-west-1".into()),
                catalog_id: None,
                object_store: None,
            },
        ),
    }
}

#[test]
fn athena_iceberg_locations_are_s3_with_a_glue_database() -> Result<(), ConfigError> {
    let loc = lake_location(
        &athena("s3://bucket/lake/", "shop_1"),
        Path::new("/p"),
        &StoreKind::Embedded,
    )?;
    assert_eq!(
        loc,
        Some(LakeLocation {
            warehouse: "s3://bucket/lake".into(),
            namespace: "shop_1".into(),
            catalog: LakeCatalog::Glue {
                region: Some("eu-west-1".into()),
                catalog_id: None,
            },
        })
    );
    for (warehouse, database, key) in [
        ("file://./x", "shop", "`warehouse`"),
        ("s3://", "shop", "`warehouse`"),
        ("s3://bucket/lake", "Shop-1", "`glue_database_name`"),
        ("s3://bucket/lake", "", "`glue_database_name`"),
    ] {
        let err = lake_location(
            &athena(warehouse, database),
            Path::new("/p"),
            &StoreKind::Embedded,
        )
        .map(|_| ());
        assert!(
            matches!(err, Err(ConfigError::BadValue { ref message, .. }) if message.contains(key)),
            "{warehouse} {database}: {err:?}"
        );
    }
    Ok(())
}

fn skipprlake(
    warehouse: &str,
    catalog_table: Option<&str>,
    object_store: Option<crate::config::connectors::ObjectStoreKind>,
) -> Named<SinkConnector> {
    Named {
        name: "lake".into(),
        connector: SinkConnector::SkipprLake(crate::config::connectors::SkipprLakeSinkConfig {
            version: None,
            warehouse: warehouse.into(),
            catalog_table: catalog_table.map(str::to_owned),
            table_namespace: None,
            region: None,
            object_store: object_store.map(crate::config::connectors::ObjectStoreSetting::Kind),
        }),
    }
}

#[test]
fn skipprlake_on_s3_keeps_pointers_in_dynamodb_and_refuses_the_embedded_store()
-> Result<(), ConfigError> {
    use crate::config::connectors::ObjectStoreKind;
    let dynamo = StoreKind::Dynamodb {
        table: "state".into(),
    };
    let p = Path::new("/p");
    let loc = lake_location(&skipprlake("s3://bucket/lake/", None, None), p, &dynamo)?;
    assert_eq!(
        loc,
        Some(LakeLocation {
            warehouse: "s3://bucket/lake".into(),
            namespace: "default".into(),
            catalog: LakeCatalog::Dynamo {
                table: "state".into(),
                region: None,
                files: None,
            },
        })
    );
    let sink = skipprlake("s3://bucket/lake", Some("lake.pointers"), None);
    for store in [&dynamo, &StoreKind::Embedded] {
        let loc = lake_location(&sink, p, store)?.map(|l| l.catalog);
        assert_eq!(
            loc,
            Some(LakeCatalog::Dynamo {
                table: "lake.pointers".into(),
                region: None,
                files: None,
            }),
            "catalog_table wins over the state store's table"
        );
    }
    let embedded = lake_location(
        &skipprlake("s3://bucket/lake", None, None),
        p,
        &StoreKind::Embedded,
    );
    match embedded {
        Err(ConfigError::BadValue { message, .. }) => {
            for key in ["catalog_table", "skippr.store", "skipprd store create"] {
                assert!(message.contains(key), "{key} not in: {message}");
            }
        }
        other => panic!("an s3 warehouse with the embedded store was accepted: {other:?}"),
    }
    for (sink, key) in [
        (
            skipprlake("file://./x", None, Some(ObjectStoreKind::S3)),
            "an S3 or R2 `object_store`",
        ),
        (
            skipprlake("s3://b/x", None, Some(ObjectStoreKind::File)),
            "a `file` `object_store`",
        ),
        (skipprlake("s3://", None, None), "`warehouse`"),
        (
            skipprlake("s3://bucket/x", Some("a/b"), None),
            "`catalog_table`",
        ),
    ] {
        let err = lake_location(&sink, p, &dynamo).map(|_| ());
        assert!(
            matches!(err, Err(ConfigError::BadValue { ref message, .. }) if message.contains(key)),
            "{key}: {err:?}"
        );
    }
    // object_store: s3 agrees with an s3:// warehouse.
    let loc = lake_location(
        &skipprlake("s3://bucket/l", None, Some(ObjectStoreKind::S3)),
        p,
        &dynamo,
    )?;
    assert_eq!(loc.map(|l| l.warehouse), Some("s3://bucket/l".to_owned()));
    Ok(())
}

/// Validate `text` as `skippr.yml` in a fresh directory, with `vars` as the environment.
fn validated(
    text: &str,
    vars: &[(&str, &str)],
    wal_flag: Option<&str>,
) -> (tempfile::TempDir, Result<ValidatedConfig, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skippr.yml");
    std::fs::write(&path, text).unwrap();
    let env: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let loaded = load_file(&path, env).unwrap();
    let result = validate(&loaded, wal_flag);
    (dir, result)
}

/// The key path and message of a [`ConfigError::BadValue`].
fn bad_value(result: Result<ValidatedConfig, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::BadValue { path, message, .. }) => (path, message),
        other => panic!("expected a BadValue, got {other:?}"),
    }
}

const FILE_SOURCE: &str = "data_sources:\n  f:\n    File:\n      path: in\n";

#[test]
fn a_duckdb_destination_carries_its_location_maintenance_and_layout() {
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n    transform:\n      batch_partition_fields: kind\n      batch_time_fields: at\n      batch_time_unit: month\n      batch_order_fields: id\n{FILE_SOURCE}\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n      table_namespace: ns\n      auto_maintenance: false\n      snapshot_retain_last: 3\n      snapshot_max_age_minutes: 2\n      compact_target_file_mb: 8\n"
    );
    let (dir, result) = validated(&text, &[], None);
    let config = result.unwrap();
    let destination = config.pipelines["p"].destination.clone().unwrap();
    let base = std::path::absolute(dir.path()).unwrap();
    assert_eq!(
        destination,
        Destination {
            name: "lake".into(),
            kind: DestinationKind::Duckdb,
            location: LakeLocation {
                warehouse: format!("file://{}", base.join("lake").display()),
                namespace: "ns".into(),
                catalog: LakeCatalog::Hadoop,
            },
            maintenance: Maintenance {
                auto: Some(false),
                retain_last: Some(3),
                max_snapshot_age: Some(Duration::from_secs(120)),
                target_file_size: Some(8 << 20),
                ..Maintenance::default()
            },
            layout: Layout {
                partition_fields: vec!["kind".into()],
                time_fields: vec!["at".into()],
                time_unit: Some(crate::config::TimeUnit::Month),
                order_fields: vec!["id".into()],
                allowed_values: Vec::new(),
                time_key: None,
            },
        }
    );
    assert_eq!(destination.kind.type_name(), "Duckdb");
    // Without a data_sink there is no destination.
    let text = format!("pipelines:\n  p:\n    data_source: data_sources.f\n{FILE_SOURCE}");
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(result.unwrap().pipelines["p"].destination, None);
}

#[test]
fn an_athena_iceberg_destination_carries_its_athena_settings_and_region() {
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n{FILE_SOURCE}\
         data_sinks:\n  lake:\n    AthenaIceberg:\n      warehouse: s3://bucket/lake/\n      glue_database_name: shop\n      athena_workgroup_name: wg\n      athena_results_s3_bucket: results\n      region: eu-west-1\n      catalog_id: '123'\n"
    );
    let (_dir, result) = validated(&text, &[], None);
    let p = result.unwrap().pipelines["p"].clone();
    let destination = p.destination.unwrap();
    assert_eq!(
        destination.kind,
        DestinationKind::AthenaIceberg {
            workgroup: Some("wg".into()),
            results_bucket: Some("results".into()),
        }
    );
    assert_eq!(
        destination.location,
        LakeLocation {
            warehouse: "s3://bucket/lake".into(),
            namespace: "shop".into(),
            catalog: LakeCatalog::Glue {
                region: Some("eu-west-1".into()),
                catalog_id: Some("123".into()),
            },
        }
    );
    assert_eq!(destination.maintenance, Maintenance::default());
    assert_eq!(
        p.aws,
        AwsSettings {
            needed: true,
            fallback_region: Some("eu-west-1".into()),
        }
    );
}

#[test]
fn the_aws_settings_say_whether_a_pass_needs_aws_and_which_region_to_fall_back_on() {
    // Local files into a local lake, WAL and state on disk: no AWS at all.
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n{FILE_SOURCE}\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n"
    );
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(result.unwrap().pipelines["p"].aws, AwsSettings::default());
    // Each AWS backend makes the pass need it.
    for (vars, extra) in [
        (
            &[("WAL_STORAGE", "s3"), ("SKIPPR_WAL_S3_BUCKET", "w")][..],
            "",
        ),
        (&[("SKIPPR_S3_BUCKET", "meta")][..], ""),
        (
            &[][..],
            "skippr:\n  store:\n    type: dynamodb\n    name: state\n",
        ),
        (
            &[][..],
            "deadletter_sinks:\n  dl:\n    S3:\n      s3_bucket: rejects\n",
        ),
    ] {
        let pipeline = if extra.starts_with("deadletter") {
            "pipelines:\n  p:\n    data_source: data_sources.f\n    deadletter_sink: deadletter_sinks.dl\n"
        } else {
            "pipelines:\n  p:\n    data_source: data_sources.f\n"
        };
        let (_dir, result) = validated(&format!("{extra}{pipeline}{FILE_SOURCE}"), vars, None);
        let aws = result.unwrap().pipelines["p"].aws.clone();
        assert_eq!(
            aws,
            AwsSettings {
                needed: true,
                fallback_region: None,
            },
            "{vars:?} {extra}"
        );
    }
    // An S3 source's region comes before the AthenaIceberg destination's.
    let source = "data_sources:\n  s:\n    S3:\n      s3_bucket: input\n      region: us-west-2\n";
    let sink = "data_sinks:\n  lake:\n    AthenaIceberg:\n      warehouse: s3://bucket/lake\n      glue_database_name: shop\n      region: eu-west-1\n";
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.s\n    data_sink: data_sinks.lake\n{source}{sink}"
    );
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(
        result.unwrap().pipelines["p"].aws,
        AwsSettings {
            needed: true,
            fallback_region: Some("us-west-2".into()),
        }
    );
    // An S3 source without a region leaves the destination's.
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.s\n    data_sink: data_sinks.lake\n{}{sink}",
        source.replace("      region: us-west-2\n", "")
    );
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(
        result.unwrap().pipelines["p"]
            .aws
            .fallback_region
            .as_deref(),
        Some("eu-west-1")
    );
}

#[test]
fn the_wal_lives_in_the_state_directory_or_under_the_pipelines_prefix_in_the_wal_bucket() {
    let text = format!(
        "skippr:\n  tenant: acme\n  workspace: ws\npipelines:\n  p:\n    data_source: data_sources.f\n    data_dir: ./d\n{FILE_SOURCE}"
    );
    let (dir, result) = validated(&text, &[], None);
    let config = result.unwrap();
    let p = &config.pipelines["p"];
    assert_eq!(
        p.wal,
        WalLocation::Disk {
            dir: dir.path().join("d").join("ws_p").join("wal"),
        }
    );
    assert_eq!(
        p.wal,
        WalLocation::Disk {
            dir: p.state_dir(&config.settings).join("wal"),
        }
    );
    let s3 = WalLocation::S3 {
        bucket: "w".into(),
        prefix: "wal/acme/ws/p/".into(),
    };
    let (_dir, result) = validated(
        &text,
        &[("WAL_STORAGE", "s3"), ("SKIPPR_WAL_S3_BUCKET", "w")],
        None,
    );
    assert_eq!(result.unwrap().pipelines["p"].wal, s3);
    // The skippr bucket stands in for a WAL bucket; the dedicated one wins.
    let (_dir, result) = validated(&text, &[("SKIPPR_S3_BUCKET", "w")], Some("s3"));
    assert_eq!(result.unwrap().pipelines["p"].wal, s3);
    let (_dir, result) = validated(
        &text,
        &[("SKIPPR_S3_BUCKET", "meta"), ("SKIPPR_WAL_S3_BUCKET", "w")],
        Some("s3"),
    );
    assert_eq!(result.unwrap().pipelines["p"].wal, s3);
}

#[test]
fn an_s3_wal_without_a_bucket_is_refused_naming_the_key() {
    let text = format!("pipelines:\n  p:\n    data_source: data_sources.f\n{FILE_SOURCE}");
    let (_dir, result) = validated(&text, &[("WAL_STORAGE", "s3")], None);
    let (path, message) = bad_value(result);
    assert_eq!(path, "skippr.wal_s3_bucket");
    for part in [
        "WAL_STORAGE",
        "SKIPPR_WAL_S3_BUCKET",
        "skippr.skippr_s3_bucket",
    ] {
        assert!(message.contains(part), "{part} not in: {message}");
    }
    let (_dir, result) = validated(&text, &[], Some("s3"));
    let (path, message) = bad_value(result);
    assert_eq!(path, "skippr.wal_s3_bucket");
    assert!(message.contains("--wal-storage"), "{message}");
    // Also without any pipeline: the settings alone are wrong.
    let (_dir, result) = validated("", &[("WAL_STORAGE", "s3")], None);
    assert_eq!(bad_value(result).0, "skippr.wal_s3_bucket");
}

#[test]
fn the_store_names_the_pipelines_partition() {
    let text = format!(
        "skippr:\n  tenant: acme\n  workspace: ws\n  store:\n    type: dynamodb\n    name: state\npipelines:\n  p:\n    data_source: data_sources.f\n{FILE_SOURCE}"
    );
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(
        result.unwrap().pipelines["p"].store,
        PipelineStore {
            kind: StoreKind::Dynamodb {
                table: "state".into(),
            },
            partition: "acme#ws#p".into(),
        }
    );
    let text = format!("pipelines:\n  p:\n    data_source: data_sources.f\n{FILE_SOURCE}");
    let (_dir, result) = validated(&text, &[], None);
    assert_eq!(
        result.unwrap().pipelines["p"].store,
        PipelineStore {
            kind: StoreKind::Embedded,
            partition: "default#default#p".into(),
        }
    );
}

#[test]
fn each_sink_error_names_its_key() {
    let sink =
        |connector: &str, fields: &str| format!("data_sinks:\n  lake:\n    {connector}:\n{fields}");
    for (text, key) in [
        (
            sink("Duckdb", "      warehouse: s3://b/x\n"),
            "data_sinks.lake.Duckdb.warehouse",
        ),
        (
            sink("Duckdb", "      warehouse: file://\n"),
            "data_sinks.lake.Duckdb.warehouse",
        ),
        (
            sink(
                "Duckdb",
                "      warehouse: file://./x\n      table_namespace: a/b\n",
            ),
            "data_sinks.lake.Duckdb.table_namespace",
        ),
        (
            sink(
                "Duckdb",
                "      warehouse: file://./x\n      snapshot_retain_last: 0\n",
            ),
            "data_sinks.lake.Duckdb.snapshot_retain_last",
        ),
        (
            sink(
                "Duckdb",
                "      warehouse: file://./x\n      compact_target_file_mb: 0\n",
            ),
            "data_sinks.lake.Duckdb.compact_target_file_mb",
        ),
        (
            sink(
                "SkipprLake",
                "      warehouse: file://./x\n      object_store: s3\n",
            ),
            "data_sinks.lake.SkipprLake.object_store",
        ),
        (
            sink(
                "SkipprLake",
                "      warehouse: file://./x\n      catalog_table: a/b\n",
            ),
            "data_sinks.lake.SkipprLake.catalog_table",
        ),
        (
            sink("SkipprLake", "      warehouse: s3://bucket/x\n"),
            "data_sinks.lake.SkipprLake.catalog_table",
        ),
        (
            sink(
                "SkipprLake",
                "      warehouse: s3://b\n      catalog_table: state\n",
            ),
            "data_sinks.lake.SkipprLake.warehouse",
        ),
        (
            sink(
                "SkipprLake",
                "      warehouse: s3://bucket/x\n      catalog_table: state\n      table_namespace: .x\n",
            ),
            "data_sinks.lake.SkipprLake.table_namespace",
        ),
        (
            sink(
                "AthenaIceberg",
                "      warehouse: s3://bucket/x\n      glue_database_name: Shop\n",
            ),
            "data_sinks.lake.AthenaIceberg.glue_database_name",
        ),
        (
            sink(
                "AthenaIceberg",
                "      warehouse: s3://bucket/x\n      glue_database_name: shop\n      object_store: file\n",
            ),
            "data_sinks.lake.AthenaIceberg.object_store",
        ),
        (
            sink(
                "AthenaIceberg",
                "      warehouse: file://./x\n      glue_database_name: shop\n",
            ),
            "data_sinks.lake.AthenaIceberg.warehouse",
        ),
    ] {
        let (_dir, result) = validated(&text, &[], None);
        assert_eq!(bad_value(result).0, key, "{text}");
    }
}

#[test]
fn relative_warehouses_resolve_to_absolute_paths_even_from_a_relative_base() {
    let loc = lake_location(
        &duckdb("file://./lake", None),
        Path::new("rel"),
        &StoreKind::Embedded,
    )
    .unwrap()
    .unwrap();
    let expected = std::path::absolute("rel/lake").unwrap();
    assert_eq!(loc.warehouse, format!("file://{}", expected.display()));
    assert!(PathBuf::from(&loc.warehouse["file://".len()..]).is_absolute());
}

const PG_SOURCE: &str = "data_sources:\n  f:\n    Postgres:\n      host: localhost\n      user: u\n      database: d\n      tables: [t]\n";

#[test]
fn pipeline_buffer_thresholds_win_over_the_variables_and_zero_is_refused() {
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    buffer_threshold_bytes: 2048\n    buffer_threshold_seconds: 5\n  q:\n    data_source: data_sources.f\n{FILE_SOURCE}"
    );
    let vars = [
        ("BUFFER_THRESHOLD_BYTES", "4096"),
        ("BUFFER_THRESHOLD_SECONDS", "9"),
    ];
    let (_dir, result) = validated(&text, &vars, None);
    let config = result.unwrap();
    assert_eq!(config.pipelines["p"].buffer_threshold_bytes, 2048);
    assert_eq!(
        config.pipelines["p"].buffer_threshold_seconds,
        Duration::from_secs(5)
    );
    assert_eq!(config.pipelines["q"].buffer_threshold_bytes, 4096);
    assert_eq!(
        config.pipelines["q"].buffer_threshold_seconds,
        Duration::from_secs(9)
    );
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    buffer_threshold_seconds: 0\n{FILE_SOURCE}"
    );
    let (path, message) = bad_value(validated(&text, &[], None).1);
    assert_eq!(path, "pipelines.p.buffer_threshold_seconds");
    assert!(message.contains("at least 1"), "{message}");
}

#[test]
fn cdc_goes_to_a_postgres_source_and_resolves_its_slot_and_publication() {
    // On a source that cannot capture changes: refused, naming the source.
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    cdc: snapshot_then_cdc\n{FILE_SOURCE}"
    );
    let (path, message) = bad_value(validated(&text, &[], None).1);
    assert_eq!(path, "pipelines.p.cdc");
    assert!(message.contains("`File` source"), "{message}");
    // `snapshot` on Postgres (both forms) is its incremental read: no stream.
    for cdc in ["snapshot", "{mode: snapshot, slot_name: s1}"] {
        let text = format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    cdc: {cdc}\n{PG_SOURCE}"
        );
        let (_dir, result) = validated(&text, &[], None);
        assert_eq!(result.unwrap().pipelines["p"].cdc, None);
    }
    // The stream modes: the pipeline's map wins over the source's keys; names default to
    // `skipprd_{pipeline}`, made a legal slot name.
    let with_keys = PG_SOURCE.replace(
        "tables: [t]\n",
        "tables: [t]\n      cdc_mode: snapshot_then_cdc\n      replication_slot_name: from_source\n      cdc_idle_timeout_seconds: 3\n",
    );
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    cdc: {{mode: cdc_only, slot_name: from_pipeline}}\n  Orders-EU:\n    data_source: data_sources.f\n{with_keys}"
    );
    let (_dir, result) = validated(&text, &[], None);
    let config = result.unwrap();
    let p = config.pipelines["p"].cdc.clone().unwrap();
    assert!(!p.snapshot_first);
    assert_eq!(
        (p.slot_name.as_str(), p.publication.as_str()),
        ("from_pipeline", "skipprd_p")
    );
    assert_eq!(p.idle_timeout, Duration::from_secs(3));
    let q = config.pipelines["Orders-EU"].cdc.clone().unwrap();
    assert!(q.snapshot_first);
    assert_eq!(
        (q.slot_name.as_str(), q.publication.as_str()),
        ("from_source", "skipprd_orders_eu")
    );
    // A slot name PostgreSQL refuses, a custom query, a cursor: refused naming the key.
    for (cdc, source, want) in [
        (
            "{mode: cdc_only, slot_name: Bad-Name}",
            PG_SOURCE.to_owned(),
            "pipelines.p.cdc.slot_name",
        ),
        (
            "cdc_only",
            PG_SOURCE.replace("tables: [t]", "query: SELECT 1"),
            "data_sources.f.Postgres.query",
        ),
        (
            "snapshot_then_cdc",
            PG_SOURCE.replace("tables: [t]", "tables: [{name: t, cursor_field: u}]"),
            "data_sources.f.Postgres.tables[0].cursor_field",
        ),
    ] {
        let text =
            format!("pipelines:\n  p:\n    data_source: data_sources.f\n    cdc: {cdc}\n{source}");
        let (path, _message) = bad_value(validated(&text, &[], None).1);
        assert_eq!(path, want);
    }
    // Streamed into Postgres with no policy declared: the source tables' keys merge.
    let sink =
        "data_sinks:\n  d:\n    Postgres:\n      host: h\n      user: u\n      database: d\n";
    for (extra, cdc, expected) in [
        ("", "cdc_only", true),
        ("    write_policy: append\n", "cdc_only", false),
        (
            "    write_policy: merge_by_key\n    primary_key: id\n",
            "cdc_only",
            false,
        ),
        ("", "snapshot", false),
    ] {
        let text = format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.d\n    cdc: {cdc}\n{extra}{PG_SOURCE}{sink}"
        );
        let (_dir, result) = validated(&text, &[], None);
        assert_eq!(
            result.unwrap().pipelines["p"].write.source_keys,
            expected,
            "{extra} {cdc}"
        );
    }
    // Into an Iceberg lake too; not into files, which cannot merge.
    for (sink, expected) in [
        (
            "data_sinks:\n  d:\n    Duckdb:\n      warehouse: file://./lake\n",
            true,
        ),
        (
            "data_sinks:\n  d:\n    File:\n      output_dir: out\n",
            false,
        ),
    ] {
        let text = format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.d\n    cdc: cdc_only\n{PG_SOURCE}{sink}"
        );
        let (_dir, result) = validated(&text, &[], None);
        assert_eq!(
            result.unwrap().pipelines["p"].write.source_keys,
            expected,
            "{sink}"
        );
    }
    // A mode that does not exist fails at load, saying what is expected.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skippr.yml");
    std::fs::write(
        &path,
        format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    cdc: sometimes\n{PG_SOURCE}"
        ),
    )
    .unwrap();
    let error = load_file(&path, BTreeMap::<String, String>::new())
        .unwrap_err()
        .to_string();
    assert!(error.contains("a CDC mode"), "{error}");
}

#[test]
fn partition_allowed_values_and_time_partition_prefix_reach_the_layout_and_are_checked() {
    let sink = "data_sinks:\n  out:\n    File:\n      output_dir: out\n";
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.out\n    transform:\n      batch_partition_fields: region\n      partition_allowed_values: eu, us\n      batch_time_fields: at\n      batch_time_unit: day\n      time_partition_prefix: dt\n      enable_single_quote_parsing: 'yes'\n      enable_unicode_parsing: true\n{FILE_SOURCE}{sink}"
    );
    let (_dir, result) = validated(&text, &[], None);
    let config = result.unwrap();
    let p = &config.pipelines["p"];
    let layout = &p.files.as_ref().unwrap().layout;
    assert_eq!(layout.allowed_values, vec!["eu", "us"]);
    assert_eq!(layout.time_key.as_deref(), Some("dt"));
    assert!(p.transform.leniency.single_quotes && p.transform.leniency.unicode);

    // From the environment too, as every transform key.
    let text = format!(
        "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.out\n{FILE_SOURCE}{sink}"
    );
    let vars = [
        ("TRANSFORM_BATCH_PARTITION_FIELDS", "region"),
        ("TRANSFORM_PARTITION_ALLOWED_VALUES", "eu"),
        ("TRANSFORM_ENABLE_UNICODE_PARSING", "yes"),
    ];
    let (_dir, result) = validated(&text, &vars, None);
    let config = result.unwrap();
    assert_eq!(
        config.pipelines["p"]
            .files
            .as_ref()
            .unwrap()
            .layout
            .allowed_values,
        vec!["eu"]
    );
    assert!(config.pipelines["p"].transform.leniency.unicode);

    // Refused where `_other` would replace the only copy of the value, or with nothing to act on.
    let lake = "data_sinks:\n  out:\n    Duckdb:\n      warehouse: file://./lake\n";
    let cases = [
        (
            format!(
                "      batch_partition_fields: region\n      partition_allowed_values: eu\n{FILE_SOURCE}{lake}"
            ),
            "pipelines.p.transform.partition_allowed_values",
            "the `Duckdb` destination `data_sinks.out`",
        ),
        (
            format!("      partition_allowed_values: eu\n{FILE_SOURCE}{sink}"),
            "pipelines.p.transform.partition_allowed_values",
            "batch_partition_fields is not set",
        ),
        (
            format!("      time_partition_prefix: dt\n{FILE_SOURCE}{sink}"),
            "pipelines.p.transform.time_partition_prefix",
            "batch_time_fields is not set",
        ),
        (
            format!(
                "      batch_time_fields: at\n      batch_time_unit: day\n      time_partition_prefix: '../x'\n{FILE_SOURCE}{sink}"
            ),
            "pipelines.p.transform.time_partition_prefix",
            "is not a partition key name",
        ),
    ];
    for (transform, key, expected) in cases {
        let text = format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.out\n    transform:\n{transform}"
        );
        let (path, message) = bad_value(validated(&text, &[], None).1);
        assert_eq!(path, key);
        assert!(message.contains(expected), "{message}");
    }
}

#[test]
fn s3_listing_depth_and_delimiter_are_bounded() {
    let s3 = |extra: &str| {
        format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\ndata_sources:\n  f:\n    S3:\n      s3_bucket: b\n{extra}"
        )
    };
    let (_dir, result) = validated(
        &s3("      s3_prefix_ordered_depth: 2\n      s3_delimiter: '|'\n"),
        &[],
        None,
    );
    assert!(result.is_ok(), "{result:?}");
    let (path, message) =
        bad_value(validated(&s3("      s3_prefix_ordered_depth: 17\n"), &[], None).1);
    assert_eq!(path, "data_sources.f.S3.s3_prefix_ordered_depth");
    assert!(message.contains("at most 16"), "{message}");
    let (path, _) = bad_value(validated(&s3("      s3_delimiter: ''\n"), &[], None).1);
    assert_eq!(path, "data_sources.f.S3.s3_delimiter");
}

#[test]
fn a_skipprlake_object_store_map_gives_the_files_their_own_endpoint_and_keys() {
    let lake = |store: &str| {
        format!(
            "skippr:\n  store: {{type: dynamodb, name: state}}\npipelines:\n  p:\n    data_source: data_sources.f\n    data_sink: data_sinks.lake\n{FILE_SOURCE}data_sinks:\n  lake:\n    SkipprLake:\n      warehouse: s3://bucket/lake\n      object_store: {store}\n"
        )
    };
    let vars = [("R2_KEY", "key-id"), ("R2_SECRET", "s3cr3t")];
    let (_dir, result) = validated(
        &lake(
            "{type: r2, endpoint: 'https://acct.r2.cloudflarestorage.com', access_key_id: '${R2_KEY}', secret_access_key: '${R2_SECRET}', path_style: false}",
        ),
        &vars,
        None,
    );
    let config = result.unwrap();
    let catalog = &config.pipelines["p"]
        .destination
        .as_ref()
        .unwrap()
        .location
        .catalog;
    let LakeCatalog::Dynamo { table, files, .. } = catalog else {
        panic!("{catalog:?}");
    };
    assert_eq!(table, "state");
    let access = files.as_ref().unwrap();
    assert_eq!(
        access.endpoint.as_deref(),
        Some("https://acct.r2.cloudflarestorage.com")
    );
    assert_eq!(access.path_style, Some(false));
    let (id, secret) = access.keys.as_ref().unwrap();
    assert_eq!((id.expose(), secret.expose()), ("key-id", "s3cr3t"));
    // Never printed.
    assert!(!format!("{catalog:?}").contains("s3cr3t"), "{catalog:?}");

    // The plain kinds stay; a map of `type: s3` without keys uses the AWS chain.
    let (_dir, result) = validated(&lake("s3"), &[], None);
    assert!(result.is_ok(), "{result:?}");

    for (store, key, expected) in [
        (
            "{type: r2}",
            "object_store.endpoint",
            "needs its `endpoint`",
        ),
        (
            "{type: s3, endpoint: 'ftp://x'}",
            "object_store.endpoint",
            "not an http:// or https:// URL",
        ),
        (
            "{type: s3, access_key_id: '${R2_KEY}'}",
            "object_store.secret_access_key",
            "without `secret_access_key`",
        ),
        (
            "{type: file}",
            "object_store",
            "needs a `file://` `warehouse`",
        ),
    ] {
        let (path, message) = bad_value(validated(&lake(store), &vars, None).1);
        assert_eq!(path, format!("data_sinks.lake.SkipprLake.{key}"), "{store}");
        assert!(message.contains(expected), "{store}: {message}");
    }
}
