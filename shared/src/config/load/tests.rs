//! Config loading and validation, through real files in temporary directories.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::config::validate::{StoreKind, WalStorage};
use crate::config::{DeadletterConnector, SourceConnector, StorageMode, validate};

const EXAMPLE: &str = "\
skippr:
  workspace: demo
pipelines:
  bikehire:
    data_source: data_sources.sample
    transform:
      namespace_fields: event_type
data_sources:
  sample:
    File:
      path: ./input/*.jsonl
";

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load_text(text: &str, pairs: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "skippr.yml", text);
    load_file(&path, env(pairs))
}

fn check(
    text: &str,
    pairs: &[(&str, &str)],
) -> Result<crate::config::ValidatedConfig, ConfigError> {
    validate(&load_text(text, pairs)?, None)
}

fn err(text: &str) -> String {
    check(text, &[]).unwrap_err().to_string()
}

#[test]
fn example_loads_and_validates() {
    let v = check(EXAMPLE, &[]).unwrap();
    assert_eq!(v.settings.workspace, "demo");
    assert_eq!(v.settings.tenant, "default");
    assert_eq!(v.settings.storage_mode, StorageMode::Local);
    assert_eq!(v.settings.store, StoreKind::Embedded);
    assert_eq!(v.settings.wal_storage, WalStorage::Disk);
    let p = v.pipeline(Some("bikehire")).unwrap();
    assert!(matches!(&p.source.connector, SourceConnector::File(f) if f.path == "./input/*.jsonl"));
    assert_eq!(p.transform.namespace_fields, vec!["event_type".to_owned()]);
    assert_eq!(p.sync_frequency.as_secs(), 900);
    assert!(p.data_dir.ends_with("data"));
    assert!(p.state_dir(&v.settings).ends_with("data/demo_bikehire"));
    // With one pipeline, none needs naming.
    assert_eq!(v.pipeline(None).unwrap().name, "bikehire");
}

#[test]
fn discovery_prefers_flag_then_env_var_then_file_names_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    assert_eq!(
        discover_config_file(None, &env(&[]), cwd).unwrap(),
        ConfigSource::NotFound
    );
    let json = write(cwd, "skipprd.json", "{}");
    assert_eq!(
        discover_config_file(None, &env(&[]), cwd).unwrap(),
        ConfigSource::Found(json)
    );
    let yaml = write(cwd, "skipprd.yaml", "");
    assert_eq!(
        discover_config_file(None, &env(&[]), cwd).unwrap(),
        ConfigSource::Found(yaml)
    );
    let first = write(cwd, "skippr.yml", "");
    assert_eq!(
        discover_config_file(None, &env(&[]), cwd).unwrap(),
        ConfigSource::Found(first)
    );
    let other = write(cwd, "other.yml", "");
    let from_env = env(&[("SKIPPR_CONFIG_FILE", "other.yml")]);
    assert_eq!(
        discover_config_file(None, &from_env, cwd).unwrap(),
        ConfigSource::EnvVar(other.clone())
    );
    let flagged = write(cwd, "flagged.yml", "");
    assert_eq!(
        discover_config_file(Some(&flagged), &from_env, cwd).unwrap(),
        ConfigSource::Flag(flagged.clone())
    );
}

#[test]
fn a_named_config_file_that_does_not_exist_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yml");
    let e = discover_config_file(Some(&missing), &env(&[]), dir.path()).unwrap_err();
    assert!(
        e.to_string().contains("nope.yml") && e.to_string().contains("--config"),
        "{e}"
    );
    let e = discover_config_file(
        None,
        &env(&[("SKIPPR_CONFIG_FILE", "gone.yml")]),
        dir.path(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("gone.yml") && e.to_string().contains("SKIPPR_CONFIG_FILE"),
        "{e}"
    );
}

#[test]
fn no_config_file_gives_an_empty_config_and_a_clear_pipeline_error() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(None, dir.path(), env(&[])).unwrap();
    assert_eq!(loaded.source, ConfigSource::NotFound);
    let v = validate(&loaded, None).unwrap();
    let e = v.pipeline(Some("bikehire")).unwrap_err().to_string();
    assert!(
        e.starts_with("pipeline 'bikehire' is not defined in no config file"),
        "{e}"
    );
    assert!(e.contains("no pipelines are defined"), "{e}");
}

#[test]
fn toml_and_json_files_share_the_yaml_structure() {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(
        dir.path(),
        "skipprd.toml",
        "[pipelines.p]\ndata_source = \"data_sources.s\"\n[data_sources.s.File]\npath = \"x.jsonl\"\n",
    );
    let json = write(
        dir.path(),
        "skipprd.json",
        r#"{"pipelines":{"p":{"data_source":"data_sources.s"}},"data_sources":{"s":{"File":{"path":"x.jsonl"}}}}"#,
    );
    for path in [toml, json] {
        let v = validate(&load_file(&path, env(&[])).unwrap(), None).unwrap();
        assert_eq!(v.pipelines["p"].source.name, "s");
    }
}

#[test]
fn unknown_key_names_file_path_line_and_suggestion() {
    let text = "\
pipelines:
  p:
    data_source: data_sources.s
data_sources:
  s:
    File:
      path: x.jsonl
data_sinks:
  lake:
    Duckdb:
      warehose: file://./lake
";
    let e = load_text(text, &[]).unwrap_err();
    match &e {
        ConfigError::UnknownKey {
            key,
            location,
            suggestion,
            ..
        } => {
            assert_eq!(key, "warehose");
            assert_eq!(location.path, "data_sinks.lake.Duckdb.warehose");
            assert_eq!(location.line, Some(11));
            assert_eq!(suggestion.as_deref(), Some("warehouse"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with("Invalid Skippr configuration in '"),
        "{msg}"
    );
    assert!(
        msg.contains(
            "skippr.yml': unknown field `warehose` at data_sinks.lake.Duckdb.warehose (line 11"
        ),
        "{msg}"
    );
    assert!(msg.ends_with("did you mean `warehouse`?"), "{msg}");
}

#[test]
fn unknown_keys_are_caught_at_every_level() {
    for (text, path) in [
        ("pipelnes: {}\n", "pipelnes"),
        ("skippr:\n  worksapce: x\n", "skippr.worksapce"),
        (
            "skippr:\n  store:\n    type: sled\n    nme: t\n",
            "skippr.store.nme",
        ),
        (
            "pipelines:\n  p:\n    data_source: data_sources.s\n    data_snk: x\n",
            "pipelines.p.data_snk",
        ),
        (
            "pipelines:\n  p:\n    data_source: data_sources.s\n    transform:\n      flatten: true\n",
            "pipelines.p.transform.flatten",
        ),
        (
            "data_sources:\n  s:\n    Postgres:\n      host: h\n      database: d\n      user: u\n      tables:\n        - name: t\n          cursor: x\n",
            "data_sources.s.Postgres.tables[0].cursor",
        ),
    ] {
        match load_text(text, &[]).unwrap_err() {
            ConfigError::UnknownKey { location, .. } => assert_eq!(location.path, path, "{text}"),
            other => panic!("{text}: unexpected {other}"),
        }
    }
}

#[test]
fn unknown_connector_type_is_named_with_a_suggestion() {
    let e = load_text(
        "data_sinks:\n  lake:\n    Duckbd:\n      warehouse: file://x\n",
        &[],
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::UnknownConnector { .. }), "{msg}");
    assert!(
        msg.contains("unknown connector type `Duckbd` at data_sinks.lake.Duckbd (line 3"),
        "{msg}"
    );
    assert!(msg.ends_with("did you mean `Duckdb`?"), "{msg}");
}

#[test]
fn an_entry_needs_exactly_one_connector_type() {
    let two = "data_sources:\n  s:\n    File:\n      path: a\n    S3:\n      s3_bucket: b\n";
    let msg = load_text(two, &[]).unwrap_err().to_string();
    assert!(
        msg.contains("exactly one connector type") && msg.contains("data_sources.s"),
        "{msg}"
    );
    let none = "data_sinks:\n  s:\n    schema_sink: schema_sinks.x\n";
    let msg = load_text(none, &[]).unwrap_err().to_string();
    assert!(
        msg.contains("no connector type") && msg.contains("data_sinks.s"),
        "{msg}"
    );
}

#[test]
fn a_bad_enum_value_lists_the_choices() {
    let text = "data_sources:\n  s:\n    File:\n      path: a\n      format: jsnl\n";
    let msg = load_text(text, &[]).unwrap_err().to_string();
    assert!(
        msg.contains("invalid value `jsnl`") && msg.contains("did you mean `jsonl`?"),
        "{msg}"
    );
    assert!(msg.contains("data_sources.s.File.format"), "{msg}");
}

#[test]
fn whole_value_env_references_are_substituted_and_partial_ones_stay_literal() {
    let text = "\
pipelines:
  p:
    data_source: data_sources.s
data_sources:
  s:
    File:
      path: ${INPUT_GLOB}
  t:
    File:
      path: x${INPUT_GLOB}
";
    let loaded = load_text(text, &[("INPUT_GLOB", "in/*.csv")]).unwrap();
    let path = |name: &str| match &loaded.config.data_sources[name].connector {
        SourceConnector::File(f) => f.path.clone(),
        _ => unreachable!(),
    };
    assert_eq!(path("s"), "in/*.csv");
    assert_eq!(path("t"), "x${INPUT_GLOB}");
    assert_eq!(
        loaded
            .env_refs
            .get("data_sources.s.File.path")
            .map(String::as_str),
        Some("INPUT_GLOB")
    );
}

#[test]
fn unset_or_empty_variables_fail_naming_the_variable_and_key_path() {
    let text = "data_sources:\n  s:\n    File:\n      path: ${MISSING_GLOB}\n";
    assert_eq!(
        load_text(text, &[]).unwrap_err().to_string(),
        "skippr.yml references ${MISSING_GLOB} at data_sources.s.File.path (line 4), but that environment variable is not set"
    );
    assert_eq!(
        load_text(text, &[("MISSING_GLOB", "")])
            .unwrap_err()
            .to_string(),
        "skippr.yml references ${MISSING_GLOB} at data_sources.s.File.path (line 4), but that environment variable is empty"
    );
}

#[test]
fn references_fill_text_fields_only() {
    let text =
        "pipelines:\n  p:\n    data_source: data_sources.s\n    sync_frequency_seconds: ${FREQ}\n";
    let msg = load_text(text, &[("FREQ", "60")]).unwrap_err().to_string();
    assert!(msg.contains("pipelines.p.sync_frequency_seconds"), "{msg}");
    assert!(msg.contains("fills text fields only"), "{msg}");
}

#[test]
fn dotenv_files_beside_the_config_fill_and_override() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), ".env", "INPUT_GLOB=from_env\nOTHER=x\n");
    write(dir.path(), ".env.local", "INPUT_GLOB=from_local\n");
    let path = write(
        dir.path(),
        "skippr.yml",
        "data_sources:\n  s:\n    File:\n      path: ${INPUT_GLOB}\n",
    );
    let loaded = load_file(&path, env(&[])).unwrap();
    assert!(
        matches!(&loaded.config.data_sources["s"].connector, SourceConnector::File(f) if f.path == "from_local")
    );
    let loaded = load_file(&path, env(&[("INPUT_GLOB", "from_process")])).unwrap();
    assert!(
        matches!(&loaded.config.data_sources["s"].connector, SourceConnector::File(f) if f.path == "from_process")
    );
}

const PG: &str = "\
data_sources:
  pg:
    Postgres:
      host: localhost
      database: app
      user: skippr
      password: PASSWORD_VALUE
";

#[test]
fn plaintext_secrets_are_rejected_without_showing_them() {
    let text = PG.replace("PASSWORD_VALUE", "hunter2");
    let e = load_text(&text, &[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::PlaintextSecret { .. }), "{msg}");
    assert!(
        msg.contains("data_sources.pg.Postgres.password (line 7"),
        "{msg}"
    );
    assert!(msg.contains("must be a ${NAME} reference"), "{msg}");
    assert!(!msg.contains("hunter2") && !format!("{e:?}").contains("hunter2"));
}

const HTTP: &str = "\
data_sources:
  api:
    HttpClient:
      url: URL_VALUE
      headers:
        Accept: application/json
        X-API-Key: KEY_VALUE
";

#[test]
fn credentials_in_http_headers_and_urls_must_be_references_and_never_show() {
    let text = HTTP
        .replace("URL_VALUE", "https://api.example.com/v1")
        .replace("KEY_VALUE", "hunter2");
    let e = load_text(&text, &[]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::PlaintextSecret { .. }), "{msg}");
    assert!(
        msg.contains("data_sources.api.HttpClient.headers.X-API-Key"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2") && !format!("{e:?}").contains("hunter2"));

    let text = HTTP
        .replace("URL_VALUE", "https://api.example.com/v1?api_key=hunter2")
        .replace("KEY_VALUE", "${API_KEY}");
    let e = load_text(&text, &[("API_KEY", "x")]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::PlaintextSecret { .. }), "{msg}");
    assert!(msg.contains("data_sources.api.HttpClient.url"), "{msg}");
    assert!(!msg.contains("hunter2"), "{msg}");

    let text = HTTP
        .replace("URL_VALUE", "${API_URL}")
        .replace("KEY_VALUE", "${API_KEY}");
    let loaded = load_text(
        &text,
        &[
            (
                "API_URL",
                "https://api.example.com/v1?token=t0ps3cret&page=1",
            ),
            ("API_KEY", "k3y-s3cret"),
        ],
    )
    .unwrap();
    let SourceConnector::HttpClient(http) = &loaded.config.data_sources["api"].connector else {
        unreachable!()
    };
    assert_eq!(
        http.url.expose(),
        "https://api.example.com/v1?token=t0ps3cret&page=1"
    );
    assert_eq!(
        http.url.to_string(),
        "https://api.example.com/v1?token=***&page=1"
    );
    assert_eq!(
        http.headers.get("x-api-key").map(|v| v.expose()),
        Some("k3y-s3cret")
    );
    let shown = format!("{loaded:?}");
    assert!(
        !shown.contains("t0ps3cret") && !shown.contains("k3y-s3cret"),
        "{shown}"
    );
    assert!(shown.contains("application/json"), "{shown}");
}

#[test]
fn referenced_secrets_resolve_and_never_show_in_debug_output() {
    let text = PG.replace("PASSWORD_VALUE", "${PG_PASSWORD}");
    let loaded = load_text(&text, &[("PG_PASSWORD", "s3cr3t-value")]).unwrap();
    let SourceConnector::Postgres(pg) = &loaded.config.data_sources["pg"].connector else {
        unreachable!()
    };
    assert_eq!(
        pg.password.as_ref().map(|s| s.expose()),
        Some("s3cr3t-value")
    );
    assert!(!format!("{loaded:?}").contains("s3cr3t-value"));
}

#[test]
fn modelled_but_unimplemented_connectors_fail_validation_by_name() {
    let text = "schema_sinks:\n  files:\n    File: {path: schemas}\n";
    let e = validate(&load_text(text, &[]).unwrap(), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "connector `File` (schema_sinks.files) is not supported yet"
    );
}

#[test]
fn dangling_references_name_both_ends() {
    let text = "pipelines:\n  p:\n    data_source: data_sources.smaple\ndata_sources:\n  sample:\n    File:\n      path: x\n";
    let msg = err(text);
    assert!(
        msg.ends_with("skippr.yml': pipelines.p.data_source references 'data_sources.smaple', but 'smaple' is not defined.; did you mean `data_sources.sample`?"),
        "{msg}"
    );
}

#[test]
fn references_must_name_the_right_section() {
    let text = "pipelines:\n  p:\n    data_source: data_sinks.sample\ndata_sources:\n  sample:\n    File:\n      path: x\n";
    let msg = err(text);
    assert!(
        msg.contains("pipelines.p.data_source is 'data_sinks.sample'"),
        "{msg}"
    );
    assert!(msg.contains("'data_sources.<name>'"), "{msg}");
}

#[test]
fn reserved_and_dotted_names_are_rejected() {
    for name in ["deadletters", "wal", "_skippr", "skippr", "metadata"] {
        let msg = err(&format!(
            "pipelines:\n  {name}:\n    data_source: data_sources.s\n"
        ));
        assert!(
            msg.contains(&format!("pipelines name '{name}' is reserved")),
            "{msg}"
        );
    }
    let msg = err("data_sources:\n  my.source:\n    File:\n      path: x\n");
    assert!(
        msg.contains("data_sources name 'my.source' contains a dot"),
        "{msg}"
    );
    let msg = err("pipelines:\n  a.b:\n    data_source: data_sources.s\n");
    assert!(msg.contains("pipelines name 'a.b' contains a dot"), "{msg}");
    // A pipeline's name is its default table: bounded like every table name.
    let long = "p".repeat(129);
    let msg = err(&format!(
        "pipelines:\n  {long}:\n    data_source: data_sources.s\n"
    ));
    assert!(
        msg.contains("is 129 bytes long; names are at most 128"),
        "{msg}"
    );
}

#[test]
fn skippr_keys_fall_back_to_the_environment() {
    let loaded = load_text(
        EXAMPLE.replace("  workspace: demo\n", "").as_str(),
        &[
            ("WORKSPACE_NAME", "envws"),
            ("TENANT", "acme"),
            ("SKIPPR_S3_BUCKET", "meta-bucket"),
            ("SKIPPR_WAL_S3_BUCKET", "wal-bucket"),
            ("DATA_DIR", "/var/skippr"),
            ("SKIPPR_CHAOS_MODE", "yes"),
        ],
    )
    .unwrap();
    let v = validate(&loaded, None).unwrap();
    assert_eq!(v.settings.workspace, "envws");
    assert_eq!(v.settings.tenant, "acme");
    assert_eq!(
        v.settings.storage_mode,
        StorageMode::S3,
        "a skippr bucket makes s3 the default"
    );
    assert_eq!(v.settings.wal_s3_bucket.as_deref(), Some("wal-bucket"));
    assert!(v.settings.chaos_mode);
    assert_eq!(v.pipelines["bikehire"].data_dir, Path::new("/var/skippr"));
    // A key in the file wins over the environment.
    let v = check(EXAMPLE, &[("WORKSPACE_NAME", "envws")]).unwrap();
    assert_eq!(v.settings.workspace, "demo");
}

#[test]
fn transform_keys_fall_back_to_transform_variables() {
    let text = "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    File:\n      path: x\n";
    let v = check(
        text,
        &[
            ("TRANSFORM_NAMESPACE_FIELDS", "kind, version"),
            ("TRANSFORM_FLATTEN_EVENTS", "true"),
        ],
    )
    .unwrap();
    let t = &v.pipelines["p"].transform;
    assert_eq!(
        t.namespace_fields,
        vec!["kind".to_owned(), "version".to_owned()]
    );
    assert!(t.flatten_events);
}

#[test]
fn unsupported_settings_are_recognised_and_rejected() {
    let msg = err("skippr:\n  store:\n    type: cloud-tables\n");
    assert!(
        msg.contains("skippr.store.type = 'cloud-tables' is not supported"),
        "{msg}"
    );
    let loaded = load_text(EXAMPLE, &[]).unwrap();
    let msg = validate(&loaded, Some("clustered"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("--wal-storage = 'clustered' is not supported"),
        "{msg}"
    );
    let loaded = load_text(
        EXAMPLE,
        &[
            ("WAL_STORAGE", "s3"),
            ("SKIPPR_WAL_S3_BUCKET", "wal-bucket"),
        ],
    )
    .unwrap();
    assert_eq!(
        validate(&loaded, None).unwrap().settings.wal_storage,
        WalStorage::S3
    );
    assert_eq!(
        validate(&loaded, Some("disk"))
            .unwrap()
            .settings
            .wal_storage,
        WalStorage::Disk
    );
    let msg = err("skippr:\n  store:\n    type: dynamodb\n");
    assert!(msg.contains("skippr.store.name: is required"), "{msg}");
}

#[test]
fn schema_sink_is_accepted_on_sink_entries_and_on_pipelines() {
    let text = "\
pipelines:
  p:
    data_source: data_sources.s
    data_sink: data_sinks.out
    schema_sink: schema_sinks.old
data_sources:
  s:
    File:
      path: x
data_sinks:
  out:
    Stdout: {}
    schema_sink: schema_sinks.new
schema_sinks:
  old:
    File:
      path: a
  new:
    File:
      path: b
";
    let loaded = load_text(text, &[]).unwrap();
    assert_eq!(
        loaded.config.data_sinks["out"].schema_sink.as_deref(),
        Some("schema_sinks.new")
    );
    assert_eq!(
        loaded.config.pipelines["p"].schema_sink.as_deref(),
        Some("schema_sinks.old")
    );
    // File schema sinks are not implemented yet: validation says so by name.
    let msg = validate(&loaded, None).unwrap_err().to_string();
    assert_eq!(
        msg,
        "connector `File` (schema_sinks.new) is not supported yet"
    );
}

#[test]
fn compatibility_root_keys_are_accepted_and_ignored() {
    let text = format!("{EXAMPLE}dbt:\n  project: x\nvector_sources:\n  a: [1, 2]\n");
    assert!(check(&text, &[]).is_ok());
}

#[test]
fn empty_sections_and_empty_files_are_an_empty_config() {
    assert!(check("", &[]).unwrap().pipelines.is_empty());
    assert!(
        check("pipelines:\ndata_sources:\n", &[])
            .unwrap()
            .pipelines
            .is_empty()
    );
}

#[test]
fn a_lake_sink_owns_its_warehouse_and_namespace() {
    let text = "\
data_sinks:
  a:
    Duckdb:
      warehouse: file://./lake
  b:
    Duckdb:
      warehouse: file://./lake/
      table_namespace: default
";
    let msg = err(text);
    assert!(
        msg.contains("data_sinks.b") && msg.contains("already used by another sink"),
        "{msg}"
    );
}

#[test]
fn yaml_syntax_errors_name_the_file_and_line() {
    let msg = load_text("pipelines:\n  p: [unclosed\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("Invalid Skippr configuration in '"),
        "{msg}"
    );
    assert!(msg.contains("line"), "{msg}");
}

fn mutate(base: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut bytes = base.as_bytes().to_vec();
    for &(pos, op, byte) in edits {
        if bytes.is_empty() {
            bytes.push(byte);
            continue;
        }
        let i = pos % bytes.len();
        match op % 4 {
            0 => bytes[i] = byte,
            1 => bytes.insert(i, byte),
            2 => {
                bytes.remove(i);
            }
            _ => {
                let end = (i + (byte as usize % 16)).min(bytes.len());
                let chunk = bytes[i..end].to_vec();
                bytes.splice(i..i, chunk);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

const FUZZ_BASE: &str = "\
skippr:
  workspace: demo
  store:
    type: sled
pipelines:
  bikehire:
    data_source: data_sources.sample
    data_sink: data_sinks.lake
    transform:
      namespace_fields: event_type, version
data_sources:
  sample:
    File:
      path: ${INPUT}
  pg:
    Postgres:
      host: h
      database: d
      user: u
      password: ${PG_PASSWORD}
      tables: [{name: t, cursor_field: updated_at}]
data_sinks:
  lake:
    Duckdb:
      warehouse: file://./lake
    schema_sink: schema_sinks.s
schema_sinks:
  s:
    File:
      path: ./schemas
";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any mutation of a valid file loads or fails with an error: it never panics.
    #[test]
    fn mutated_yaml_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..12)) {
        let text = mutate(FUZZ_BASE, &edits);
        let dir = tempfile::tempdir().unwrap();
        for name in ["skippr.yml", "skipprd.toml", "skipprd.json"] {
            let path = write(dir.path(), name, &text);
            if let Ok(loaded) = load_file(&path, env(&[("INPUT", "x"), ("PG_PASSWORD", "p")])) {
                let _ = validate(&loaded, None).map(|v| v.pipeline(None).map(|p| p.name.clone()));
            }
        }
    }
}

#[test]
fn plain_yaml_scalars_fill_text_fields() {
    let text = "skippr:\n  workspace: 2024\npipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    File:\n      version: 1.2\n      path: 2024\n";
    let v = check(text, &[]).unwrap();
    assert_eq!(v.settings.workspace, "2024");
    let SourceConnector::File(f) = &v.pipelines["p"].source.connector else {
        unreachable!()
    };
    assert_eq!(f.path, "2024");
    assert_eq!(f.version.as_deref(), Some("1.2"));
    // A number where a number belongs stays a number; text where a number belongs is still an error.
    let msg = err(
        "pipelines:\n  p:\n    data_source: data_sources.s\n    sync_frequency_seconds: often\n",
    );
    assert!(msg.contains("pipelines.p.sync_frequency_seconds"), "{msg}");
}

#[test]
fn a_name_defined_twice_is_an_error_not_a_silent_overwrite() {
    let text = "pipelines:\n  p:\n    data_source: data_sources.a\n  p:\n    data_source: data_sources.b\n";
    let msg = load_text(text, &[]).unwrap_err().to_string();
    assert!(msg.contains("`p` is defined twice"), "{msg}");
    assert!(msg.contains("line 4"), "{msg}");
}

#[test]
fn a_file_of_comments_only_is_an_empty_config() {
    for text in ["# nothing yet\n", "---\n", "# a\n---\n# b\n"] {
        assert!(check(text, &[]).unwrap().pipelines.is_empty(), "{text:?}");
    }
}

#[test]
fn ignored_sections_are_not_substituted() {
    let text = format!("{EXAMPLE}dbt:\n  profile: ${{NOT_SET_FOR_DBT}}\n");
    assert!(check(&text, &[]).is_ok());
}

#[test]
fn settings_from_the_environment_are_reported_by_variable_name() {
    let e = check(
        EXAMPLE.replace("  workspace: demo\n", "").as_str(),
        &[("WORKSPACE_NAME", "a b")],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "WORKSPACE_NAME = 'a b': may only contain letters, digits, `_` and `-`"
    );
    let e = check(EXAMPLE, &[("BUFFER_THRESHOLD_BYTES", "lots")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "BUFFER_THRESHOLD_BYTES = 'lots': is not a positive number of bytes"
    );
    let e = check(EXAMPLE, &[("SKIPPR_LEASE_TTL_SECONDS", "0")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SKIPPR_LEASE_TTL_SECONDS = '0': is not a positive whole number of seconds"
    );
    assert_eq!(
        check(EXAMPLE, &[("SKIPPR_LEASE_TTL_SECONDS", "3")])
            .unwrap()
            .settings
            .lease_ttl
            .as_secs(),
        3
    );
    assert_eq!(
        check(EXAMPLE, &[]).unwrap().settings.lease_ttl.as_secs(),
        30
    );
    let loaded = load_text(EXAMPLE, &[]).unwrap();
    let e = validate(&loaded, Some("tape")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--wal-storage = 'tape': is not a WAL storage; use `disk` (default) or `s3`"
    );
    let e = check("skippr:\n  workspace: a/b\n", &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("skippr.workspace: 'a/b' may only contain"),
        "{e}"
    );
}

#[test]
fn an_empty_file_path_is_a_config_error() {
    let msg = err(
        "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    File:\n      path: ''\n",
    );
    assert!(
        msg.contains("data_sources.s.File.path: must not be empty"),
        "{msg}"
    );
}

#[test]
fn the_s3_source_validates_and_names_its_keys_in_errors() {
    let pipeline =
        "pipelines:\n  p:\n    data_source: data_sources.s\ndata_sources:\n  s:\n    S3:\n";
    let loaded = load_text(
        &format!("{pipeline}      s3_bucket: logs\n      s3_prefix: in/\n      s3_listing: full\n      region: eu-west-1\n"),
        &[],
    )
    .unwrap();
    let validated = validate(&loaded, None).unwrap();
    let SourceConnector::S3(c) = &validated.pipelines["p"].source.connector else {
        panic!("not the S3 source");
    };
    assert_eq!(
        c.s3_listing,
        Some(crate::config::connectors::S3Listing::Full)
    );
    assert_eq!(c.region.as_deref(), Some("eu-west-1"));
    for (fields, expected) in [
        (
            "      s3_bucket: ''\n",
            "data_sources.s.S3.s3_bucket: must not be empty",
        ),
        (
            "      s3_bucket: s3://logs/in\n",
            "data_sources.s.S3.s3_bucket: must be a bucket name, not a URI or path",
        ),
        (
            "      s3_bucket: logs\n      batch_size: 0\n",
            "data_sources.s.S3.batch_size: must be at least 1",
        ),
    ] {
        let msg = err(&format!("{pipeline}{fields}"));
        assert!(msg.contains(expected), "{msg}");
    }
    let msg = err(&format!(
        "{pipeline}      s3_bucket: logs\n      s3_listing: sometimes\n"
    ));
    assert!(msg.contains("s3_listing"), "{msg}");
    assert!(msg.contains("start_after"), "{msg}");
}

#[test]
fn schema_sink_references_are_checked_on_every_sink() {
    let msg = err("data_sinks:\n  out:\n    Stdout: {}\n    schema_sink: schema_sinks.nope\n");
    assert!(
        msg.contains("data_sinks.out.schema_sink references 'schema_sinks.nope'"),
        "{msg}"
    );
}

#[test]
fn a_directory_given_as_config_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let e = discover_config_file(Some(dir.path()), &env(&[]), dir.path()).unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn an_s3_deadletter_sink_validates_its_bucket_and_prefix() {
    let config = |bucket: &str, prefix: &str| {
        format!(
            "pipelines:\n  p:\n    data_source: data_sources.f\n    deadletter_sink: deadletter_sinks.rejects\n\
             data_sources:\n  f:\n    File:\n      path: in\n\
             deadletter_sinks:\n  rejects:\n    S3:\n      s3_bucket: {bucket}\n      s3_prefix: {prefix}\n"
        )
    };
    let ok = check(&config("rejects-bucket", "dl/"), &[]).unwrap();
    assert!(matches!(
        ok.pipelines["p"].deadletter_sink.as_ref().map(|d| &d.connector),
        Some(DeadletterConnector::S3(c)) if c.s3_bucket == "rejects-bucket"
    ));
    let msg = err(&config("s3://rejects-bucket", "dl/"));
    assert!(
        msg.contains("deadletter_sinks.rejects.S3.s3_bucket"),
        "{msg}"
    );
    assert!(msg.contains("must be a bucket name"), "{msg}");
    let msg = err(&config("rejects-bucket", "s3://b/dl"));
    assert!(
        msg.contains("deadletter_sinks.rejects.S3.s3_prefix"),
        "{msg}"
    );
    let msg = err(&config("rejects-bucket", "dl/../x"));
    assert!(
        msg.contains("deadletter_sinks.rejects.S3.s3_prefix"),
        "{msg}"
    );
}

/// Regression: an unknown value of an enum whose values are all capitals (`method: DELETE`)
/// was reported as an unknown connector type; it is an invalid value naming the choices.
#[test]
fn an_unknown_http_method_is_an_invalid_value_not_a_connector_type() {
    let e = load_text(
        "data_sources:\n  api:\n    HttpClient:\n      url: http://127.0.0.1:1/x\n      method: DELETE\n",
        &[],
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::Invalid { .. }), "{msg}");
    assert!(
        msg.contains("invalid value `DELETE`, expected one of `GET`, `POST`, `PUT`"),
        "{msg}"
    );
    assert!(msg.contains("method"), "{msg}");
}
