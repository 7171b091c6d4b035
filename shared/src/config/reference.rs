//! The configuration reference (`docs/config.md`), generated from the config structs' doc
//! comments through their JSON schemas, so the docs cannot drift from the code: a test
//! compares the committed file with [`markdown`] and fails when it is stale
//! (`SKIPPR_BLESS=1 cargo test -p skipprd-shared config::reference` rewrites it).

use schemars::{Schema, schema_for};
use serde_json::Value;

use super::connectors::{DeadletterConnector, SchemaSinkConnector, SinkConnector, SourceConnector};
use super::{Config, PipelineConfig, SkipprSettings, StoreConfig, TransformConfig};

/// One documented table: a heading, an intro and a schema whose properties are listed.
struct Section {
    heading: String,
    intro: String,
    schema: Schema,
}

fn sections() -> Vec<Section> {
    let mut out = vec![
        Section {
            heading: "Root".into(),
            intro:
                "The top level of `skippr.yml`. Any other root key is rejected (except `dbt` and \
                    `vector_sources`, accepted and ignored for compatibility)."
                    .into(),
            schema: schema_for!(Config),
        },
        Section {
            heading: "`skippr`".into(),
            intro: String::new(),
            schema: schema_for!(SkipprSettings),
        },
        Section {
            heading: "`skippr.store`".into(),
            intro: String::new(),
            schema: schema_for!(StoreConfig),
        },
        Section {
            heading: "`pipelines.<name>`".into(),
            intro: "References are written `<section>.<name>`.".into(),
            schema: schema_for!(PipelineConfig),
        },
        Section {
            heading: "`pipelines.<name>.transform`".into(),
            intro: String::new(),
            schema: schema_for!(TransformConfig),
        },
    ];
    let sets = [
        ("data_sources", "Sources.", SourceConnector::type_schemas()),
        (
            "data_sinks",
            "Destinations. An entry may also carry `schema_sink: schema_sinks.<name>` beside its connector type (it wins over the pipeline's older `schema_sink`). The Iceberg sinks (`Duckdb`, `SkipprLake`, `AthenaIceberg`) are exactly once; `File`, `S3` and `Athena` write Hive-layout files named by pipeline and WAL batch, overwritten on retry (see docs/destinations.md); `Stdout` prints JSON lines with no guarantee.",
            SinkConnector::type_schemas(),
        ),
        (
            "deadletter_sinks",
            "Where rejected records go: one object per WAL batch that has rejected records, written whole, so a retry replaces it and never appends (default format `jsonl`). `File`: `{path}/{pipeline}/b{batch id, 20 digits}.jsonl` (or `.parquet`); `skipprd deadletters replay` sends these files through the pipeline again. `S3`: `s3://{s3_bucket}/{s3_prefix}/{pipeline}/b{batch id, 20 digits}.jsonl` (or `.parquet`), one PUT per object, in the same encoding as the `File` sink; `deadletters replay` replays these objects too, each exactly once (a replayed object moves to `{pipeline}/replayed/`). `Athena`: `s3://{s3_bucket}/{s3_prefix}/_dl_{pipeline}/b{batch id, 20 digits}.parquet`, the location of the Glue table `_dl_{pipeline}` in `glue_database_name` (created when missing; Parquet, so not replayed).",
            DeadletterConnector::type_schemas(),
        ),
        (
            "schema_sinks",
            "Where schemas are written. `Glue` describes an `Athena` data sink's Hive tables (`discover` creates or evolves them, writing no row); `AthenaIceberg`, `Duckdb` and `SkipprLake` must equal their data sink (the same type, warehouse and namespace), and `discover` creates or evolves that sink's tables. `File` and `S3` are not supported yet.",
            SchemaSinkConnector::type_schemas(),
        ),
    ];
    for (section, intro, types) in sets {
        for (i, (type_name, schema)) in types.into_iter().enumerate() {
            out.push(Section {
                heading: format!("`{section}.<name>.{type_name}`"),
                intro: if i == 0 {
                    intro.to_owned()
                } else {
                    String::new()
                },
                schema,
            });
            if section == "data_sources" && type_name == "HttpClient" {
                out.extend(http_sections());
            }
        }
    }
    out
}

/// The tables of the `HttpClient` source's nested keys.
fn http_sections() -> Vec<Section> {
    use super::http::{
        CursorPaginator, HttpAuth, HttpIncremental, HttpPaginatorConfig, NextUrlPaginator,
        OffsetPaginator, PageNumberPaginator,
    };
    let at = |key: &str| format!("`data_sources.<name>.HttpClient.{key}`");
    vec![
        Section {
            heading: at("auth"),
            intro: "Or the flat spellings `auth_strategy`, `auth_user`, `auth_password`, `auth_token` (not both).".into(),
            schema: schema_for!(HttpAuth),
        },
        Section {
            heading: at("paginator"),
            intro: String::new(),
            schema: schema_for!(HttpPaginatorConfig),
        },
        Section {
            heading: at("paginator.next_url"),
            intro: String::new(),
            schema: schema_for!(NextUrlPaginator),
        },
        Section {
            heading: at("paginator.cursor"),
            intro: String::new(),
            schema: schema_for!(CursorPaginator),
        },
        Section {
            heading: at("paginator.offset"),
            intro: String::new(),
            schema: schema_for!(OffsetPaginator),
        },
        Section {
            heading: at("paginator.page_number"),
            intro: String::new(),
            schema: schema_for!(PageNumberPaginator),
        },
        Section {
            heading: at("incremental"),
            intro: String::new(),
            schema: schema_for!(HttpIncremental),
        },
    ]
}

/// Every property in the documented schemas that has no description, as `heading: key`.
pub fn undocumented() -> Vec<String> {
    let mut missing = Vec::new();
    for s in sections() {
        for (key, prop) in properties(&s.schema) {
            if description(prop).is_none() {
                missing.push(format!("{}: {key}", s.heading));
            }
        }
    }
    missing
}

/// The whole reference as Markdown.
pub fn markdown() -> String {
    let mut out = String::from(
        "<!-- Generated from the doc comments in shared/src/config/. Do not edit: run\n     \
         `SKIPPR_BLESS=1 cargo test -p skipprd-shared config::reference` to regenerate. -->\n\
         # skippr.yml reference\n\n\
         The file is found by `--config PATH`, else `SKIPPR_CONFIG_FILE`, else the first of \
         `skippr.yml`, `skippr.yaml`, `skipprd.yml`, `skipprd.yaml`, `skipprd.toml`, `skipprd.json` \
         in the current directory. Every key below is checked: an unknown key fails before anything \
         runs, naming the file, the key path and its line, with a suggestion when one is close.\n\n\
         Text values that are exactly `${NAME}` are replaced from the environment (then \
         `.env.local`, then `.env` beside the file); a partial `x${NAME}` stays literal; an unset or \
         empty variable is an error. Fields of type *secret* must be written as `${NAME}`.\n\n\
         Connector entries map a logical name (no dots) to exactly one connector type; every \
         connector also accepts an optional `version` pin.\n",
    );
    for s in sections() {
        out.push_str(&format!("\n## {}\n\n", s.heading));
        if let Some(d) = description(s.schema.as_value()) {
            out.push_str(&one_line(d));
            out.push_str("\n\n");
        }
        if !s.intro.is_empty() {
            out.push_str(&s.intro);
            out.push_str("\n\n");
        }
        let required: Vec<&str> = s
            .schema
            .as_value()
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        out.push_str("| key | type | required | description |\n|---|---|---|---|\n");
        for (key, prop) in properties(&s.schema) {
            let ty = type_label(prop, s.schema.as_value());
            let req = if required.contains(&key.as_str()) {
                "yes"
            } else {
                "no"
            };
            let desc = description(prop).map(one_line).unwrap_or_default();
            out.push_str(&format!(
                "| `{key}` | {ty} | {req} | {} |\n",
                desc.replace('|', "\\|")
            ));
        }
    }
    out
}

fn properties(schema: &Schema) -> Vec<(String, &Value)> {
    schema
        .as_value()
        .get("properties")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v)).collect())
        .unwrap_or_default()
}

fn description(v: &Value) -> Option<&str> {
    v.get("description").and_then(Value::as_str)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn resolve<'a>(v: &'a Value, root: &'a Value) -> &'a Value {
    match v
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        Some(name) => root.get("$defs").and_then(|d| d.get(name)).unwrap_or(v),
        None => v,
    }
}

fn type_label(v: &Value, root: &Value) -> String {
    if v.get("x-secret").and_then(Value::as_bool) == Some(true) {
        return "secret".into();
    }
    if let Some(any) = v
        .get("anyOf")
        .or_else(|| v.get("oneOf"))
        .and_then(Value::as_array)
    {
        let labels: Vec<String> = any
            .iter()
            .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
            .map(|s| type_label(s, root))
            .collect();
        return labels.join(" \\| ");
    }
    if let Some(name) = v
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        let target = resolve(v, root);
        if target.get("properties").is_some() || target.get("additionalProperties").is_some() {
            return format!("map ({name})");
        }
        return type_label(target, root);
    }
    if let Some(values) = v.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .filter_map(Value::as_str)
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    if let Some(c) = v.get("const").and_then(Value::as_str) {
        return format!("`{c}`");
    }
    let types: Vec<&str> = match v.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    match types.first().copied() {
        Some("array") => match v.get("items") {
            Some(items) => format!("list of {}", type_label(items, root)),
            None => "list".into(),
        },
        Some("object") => match v.get("additionalProperties") {
            Some(ap) if ap.is_object() => format!("map of {}", type_label(ap, root)),
            _ => "map".into(),
        },
        Some("integer") => "integer".into(),
        Some(t) => t.to_owned(),
        None => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_field_has_a_doc_comment() {
        let missing = undocumented();
        assert!(
            missing.is_empty(),
            "fields without a doc comment: {missing:?}"
        );
    }

    #[test]
    fn docs_config_md_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config.md");
        let generated = markdown();
        if std::env::var_os("SKIPPR_BLESS").is_some() {
            std::fs::write(&path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/config.md is stale: run `SKIPPR_BLESS=1 cargo test -p skipprd-shared config::reference`"
        );
    }

    #[test]
    fn reference_lists_connector_fields_and_marks_secrets() {
        let md = markdown();
        assert!(md.contains("## `data_sinks.<name>.Duckdb`"));
        assert!(md.contains("| `warehouse` | string | yes |"));
        assert!(md.contains("| `password` | secret | no |"));
    }
}
