//! The overwrite-on-retry destinations' keys and the schema sinks paired with a data sink,
//! through real config files.

use std::collections::BTreeMap;

use super::super::super::{load_file, validate};
use super::*;

/// The quickstart's config, as the issue gives it.
const QUICKSTART: &str = "\
skippr: {workspace: quickstart, skippr_s3_bucket: your-state-bucket}
pipelines:
  bikehire:
    data_source: data_sources.sample
    data_sink: data_sinks.athena
    schema_sink: schema_sinks.glue
data_sources:
  sample: {S3: {s3_bucket: skippr-public-sample-data, s3_prefix: bike-hire, endpoint_url: 'http://localhost:5000'}}
data_sinks:
  athena:
    Athena:
      s3_bucket: your-output-bucket
      s3_prefix: data/bikehire
      glue_database_name: skippr_quickstart
      athena_workgroup_name: primary
      athena_results_s3_bucket: your-athena-results
      format: parquet
      region: eu-west-1
      catalog: '123456789012'
      max_concurrency: 4
      discovery_cache_ttl_secs: 60
schema_sinks:
  glue: {Glue: {glue_database_name: skippr_quickstart}}
";

fn check(text: &str) -> Result<crate::config::ValidatedConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skippr.yml");
    std::fs::write(&path, text).unwrap();
    validate(&load_file(&path, BTreeMap::new())?, None)
}

fn err(text: &str) -> String {
    check(text).unwrap_err().to_string()
}

#[test]
fn the_quickstart_config_validates_with_every_athena_key() {
    let v = check(QUICKSTART).unwrap();
    let p = &v.pipelines["bikehire"];
    assert!(p.destination.is_none());
    let files = p.files.clone().unwrap();
    assert_eq!(files.format, OutputFormat::Parquet);
    assert_eq!(
        files.kind,
        FileDestinationKind::Athena(AthenaTarget {
            bucket: "your-output-bucket".into(),
            prefix: "data/bikehire".into(),
            database: "skippr_quickstart".into(),
            region: Some("eu-west-1".into()),
            catalog_id: Some("123456789012".into()),
            workgroup: Some("primary".into()),
            results_bucket: Some("your-athena-results".into()),
            glue_cache_ttl: Some(std::time::Duration::from_secs(60)),
            upload_concurrency: 4,
        })
    );
    assert!(p.aws.needed);
    match &p.source.connector {
        crate::config::SourceConnector::S3(c) => {
            assert_eq!(c.endpoint.as_deref(), Some("http://localhost:5000"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_database_comes_from_the_glue_schema_sink_on_the_sink_entry_with_its_defaults() {
    let text = QUICKSTART
        .replace("      glue_database_name: skippr_quickstart\n", "")
        .replace("      athena_workgroup_name: primary\n", "")
        .replace("      region: eu-west-1\n", "")
        .replace("      catalog: '123456789012'\n", "")
        .replace("    schema_sink: schema_sinks.glue\n", "")
        .replace("      discovery_cache_ttl_secs: 60\n", "      discovery_cache_ttl_secs: 60\n    schema_sink: schema_sinks.glue\n")
        .replace(
            "{Glue: {glue_database_name: skippr_quickstart}}",
            "{Glue: {glue_database_name: skippr_quickstart, s3_bucket: your-output-bucket, s3_prefix: data/bikehire/, region: us-east-2, catalog: '42', athena_workgroup_name: wg, athena_results_s3_bucket: res}}",
        );
    let v = check(&text).unwrap();
    let FileDestinationKind::Athena(t) = v.pipelines["bikehire"].files.clone().unwrap().kind else {
        panic!()
    };
    assert_eq!(t.database, "skippr_quickstart");
    assert_eq!(t.region.as_deref(), Some("us-east-2"));
    assert_eq!(t.catalog_id.as_deref(), Some("42"));
    assert_eq!(t.workgroup.as_deref(), Some("wg"));
    // The sink's own key wins.
    assert_eq!(t.results_bucket.as_deref(), Some("your-athena-results"));
}

#[test]
fn a_glue_database_mismatch_names_both_keys() {
    let text = QUICKSTART.replace(
        "{Glue: {glue_database_name: skippr_quickstart}}",
        "{Glue: {glue_database_name: other_db}}",
    );
    let msg = err(&text);
    assert!(
        msg.contains("data_sinks.athena.Athena.glue_database_name")
            && msg.contains("schema_sinks.glue.Glue.glue_database_name")
            && msg.contains("other_db"),
        "{msg}"
    );
    let text = QUICKSTART.replace(
        "{Glue: {glue_database_name: skippr_quickstart}}",
        "{Glue: {glue_database_name: skippr_quickstart, s3_prefix: elsewhere}}",
    );
    assert!(
        err(&text).contains("schema_sinks.glue.Glue.s3_prefix"),
        "{}",
        err(&text)
    );
}

#[test]
fn missing_required_keys_and_dangling_schema_sinks_are_named() {
    let no_db = QUICKSTART
        .replace("      glue_database_name: skippr_quickstart\n", "")
        .replace("    schema_sink: schema_sinks.glue\n", "");
    let msg = err(&no_db);
    assert!(
        msg.contains("data_sinks.athena.Athena.glue_database_name: is required"),
        "{msg}"
    );
    let no_prefix = QUICKSTART.replace("      s3_prefix: data/bikehire\n", "");
    let msg = err(&no_prefix);
    assert!(msg.contains("missing field `s3_prefix`"), "{msg}");
    let dangling = QUICKSTART.replace(
        "schema_sink: schema_sinks.glue",
        "schema_sink: schema_sinks.nope",
    );
    let msg = err(&dangling);
    assert!(
        msg.contains("pipelines.bikehire.schema_sink") && msg.contains("nope"),
        "{msg}"
    );
    let bad_db = QUICKSTART
        .replace("skippr_quickstart}}", "Skippr-QS}}")
        .replace("      glue_database_name: skippr_quickstart\n", "");
    let msg = err(&bad_db);
    assert!(
        msg.contains("glue_database_name") && msg.contains("lowercase"),
        "{msg}"
    );
    let csv = QUICKSTART.replace("      format: parquet\n", "      format: csv\n");
    assert!(
        err(&csv).contains("data_sinks.athena.Athena.format"),
        "{}",
        err(&csv)
    );
    let unknown = QUICKSTART.replace("      format: parquet\n", "      fromat: parquet\n");
    assert!(
        err(&unknown).contains("unknown field `fromat`"),
        "{}",
        err(&unknown)
    );
}

const FILES: &str = "\
pipelines:
  p:
    data_source: data_sources.s
    data_sink: data_sinks.out
data_sources:
  s: {File: {path: x}}
data_sinks:
";

#[test]
fn file_s3_and_stdout_destinations_take_their_keys() {
    let v = check(&format!(
        "{FILES}  out: {{File: {{output_dir: ./out, format: csv}}}}\n"
    ))
    .unwrap();
    let f = v.pipelines["p"].files.clone().unwrap();
    assert_eq!(f.format, OutputFormat::Csv);
    let FileDestinationKind::File { dir } = f.kind else {
        panic!()
    };
    assert!(
        dir.is_absolute() && dir.ends_with("out"),
        "{}",
        dir.display()
    );
    assert!(!v.pipelines["p"].aws.needed);

    let v = check(&format!(
        "{FILES}  out: {{S3: {{s3_bucket: b, s3_prefix: /x/y/, format: jsonl, endpoint_url: 'http://h:1', region: eu-west-2}}}}\n"
    ))
    .unwrap();
    let f = v.pipelines["p"].files.clone().unwrap();
    assert_eq!(f.format, OutputFormat::Jsonl);
    assert_eq!(
        f.kind,
        FileDestinationKind::S3 {
            bucket: "b".into(),
            prefix: "x/y".into(),
            region: Some("eu-west-2".into()),
            endpoint: Some("http://h:1".into()),
        }
    );
    assert!(v.pipelines["p"].aws.needed);

    let v = check(&format!("{FILES}  out: {{Stdout: {{}}}}\n")).unwrap();
    assert_eq!(
        v.pipelines["p"].files.clone().unwrap().kind,
        FileDestinationKind::Stdout
    );
    // What the validator refuses, the reference says is not there (docs/config.md).
    for format in ["parquet", "csv"] {
        let message = err(&format!("{FILES}  out: {{Stdout: {{format: {format}}}}}\n"));
        assert!(
            message.contains("data_sinks.out.Stdout.format")
                && message.contains("`Stdout` prints JSON lines only")
                && message.contains("use the `File` sink"),
            "{message}"
        );
    }
    let v = check(&format!("{FILES}  out: {{Stdout: {{format: jsonl}}}}\n")).unwrap();
    assert_eq!(
        v.pipelines["p"].files.clone().unwrap().format,
        OutputFormat::Jsonl
    );
    let reference = crate::config::reference::markdown();
    let stdout = reference
        .split("## `data_sinks.<name>.Stdout`")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    assert!(stdout.contains("Output format: only `jsonl`"), "{stdout}");
    assert!(
        err(&format!("{FILES}  out: {{File: {{output_dir: ''}}}}\n"))
            .contains("data_sinks.out.File.output_dir")
    );
    assert!(
        err(&format!("{FILES}  out: {{S3: {{s3_bucket: 's3://b'}}}}\n"))
            .contains("data_sinks.out.S3.s3_bucket")
    );
}

#[test]
fn paired_schema_sinks_must_equal_their_data_sink() {
    let base = "\
pipelines:
  p:
    data_source: data_sources.s
    data_sink: data_sinks.lake
    schema_sink: schema_sinks.tables
data_sources:
  s: {File: {path: x}}
data_sinks:
  lake: {Duckdb: {warehouse: 'file://./lake'}}
schema_sinks:
";
    check(&format!(
        "{base}  tables: {{Duckdb: {{warehouse: 'file://./lake'}}}}\n"
    ))
    .unwrap();
    let msg = err(&format!(
        "{base}  tables: {{Duckdb: {{warehouse: 'file://./other'}}}}\n"
    ));
    assert!(
        msg.contains("schema_sinks.tables.Duckdb") && msg.contains("must equal"),
        "{msg}"
    );
    let msg = err(&format!(
        "{base}  tables: {{SkipprLake: {{warehouse: 'file://./lake'}}}}\n"
    ));
    assert!(
        msg.contains("schema_sinks.tables.SkipprLake") && msg.contains("is `Duckdb`"),
        "{msg}"
    );
    let msg = err(&format!(
        "{base}  tables: {{AthenaIceberg: {{warehouse: 's3://bkt/w', glue_database_name: db}}}}\n"
    ));
    assert!(msg.contains("schema_sinks.tables.AthenaIceberg"), "{msg}");
    let msg = err(&format!(
        "{base}  tables: {{Glue: {{glue_database_name: db}}}}\n"
    ));
    assert!(
        msg.contains("schema_sinks.tables") && msg.contains("Athena"),
        "{msg}"
    );
    let athena = base.replace(
        "{Duckdb: {warehouse: 'file://./lake'}}",
        "{AthenaIceberg: {warehouse: 's3://bkt/w', glue_database_name: db}}",
    );
    check(&format!(
        "{athena}  tables: {{AthenaIceberg: {{warehouse: 's3://bkt/w/', glue_database_name: db}}}}\n"
    ))
    .unwrap();
    let skl = base.replace(
        "{Duckdb: {warehouse: 'file://./lake'}}",
        "{SkipprLake: {warehouse: 'file://./lake'}}",
    );
    check(&format!(
        "{skl}  tables: {{SkipprLake: {{warehouse: 'file://./lake'}}}}\n"
    ))
    .unwrap();
    let orphan = base.replace("    data_sink: data_sinks.lake\n", "");
    let msg = err(&format!(
        "{orphan}  tables: {{Duckdb: {{warehouse: 'file://./lake'}}}}\n"
    ));
    assert!(
        msg.contains("pipelines.p.schema_sink") && msg.contains("no `data_sink`"),
        "{msg}"
    );
}

#[test]
fn deadletter_file_sinks_take_output_dir_or_path_and_refuse_csv() {
    let base = "\
pipelines:
  p: {data_source: data_sources.s, deadletter_sink: deadletter_sinks.dl}
data_sources:
  s: {File: {path: x}}
deadletter_sinks:
";
    check(&format!("{base}  dl: {{File: {{path: ./dl}}}}\n")).unwrap();
    check(&format!("{base}  dl: {{File: {{output_dir: ./dl}}}}\n")).unwrap();
    let msg = err(&format!(
        "{base}  dl: {{File: {{output_dir: ./dl, format: csv}}}}\n"
    ));
    assert!(msg.contains("deadletter_sinks.dl.File.format"), "{msg}");
}
