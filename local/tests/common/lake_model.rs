//! The `shop.shop` table of a test project (pipeline `shop`, Iceberg namespace `shop`) read by
//! independent readers and compared with a model of its rows (id -> (v, region)).
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test support: a failed read should fail the test loudly"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::local_aws::reader_python;

/// The table's current metadata file, as the destination's catalog names it.
pub fn current_metadata(dir: &Path) -> String {
    let loaded =
        skipprd::config::load_file(&dir.join("skippr.yml"), skipprd::config::ProcessEnv).unwrap();
    let config = skipprd::config::validate(&loaded, None).unwrap();
    let sink = skipprd::sinks::open(config.pipeline(Some("shop")).unwrap())
        .unwrap()
        .unwrap();
    let table = sink
        .block_on(async {
            use iceberg::Catalog as _;
            sink.catalog().load_table(&sink.table_ident("shop")).await
        })
        .unwrap();
    let location = table.metadata_location().unwrap();
    location
        .strip_prefix("file://")
        .unwrap_or(location)
        .to_owned()
}

/// DuckDB and PyIceberg (PyIceberg alone on S3) read exactly `model` from the table's current
/// metadata file.
pub fn assert_model(dir: &Path, model: &BTreeMap<u64, (u64, String)>, what: &str) {
    let table = current_metadata(dir);
    let s3 = table.starts_with("s3://");
    let script = if s3 {
        "read_s3_table.py"
    } else {
        "read_table.py"
    };
    let out = Command::new(reader_python())
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/readers")
                .join(script),
        )
        .args(["--key", "id", "--values"])
        .arg(&table)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read_table.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: Vec<Value> = model
        .iter()
        .map(|(id, (v, region))| json!([id, v, region]))
        .collect();
    let readers: &[&str] = if s3 {
        &["pyiceberg"]
    } else {
        &["duckdb", "pyiceberg"]
    };
    for reader in readers {
        let r = &report["tables"][&table];
        let r = if s3 { r } else { &r[reader] };
        let got: Vec<Value> = r["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: {reader}: {r}"))
            .iter()
            .map(|row| json!([row["id"], row["v"], row["region"]]))
            .collect();
        assert_eq!(got.len(), want.len(), "{what}: {reader}: row count");
        assert!(got == want, "{what}: {reader} differs from the model");
    }
}
