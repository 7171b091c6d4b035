//! The saved schema file: format version 1, atomic save, load, and the text tree.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

use serde_json::{Map, Value};

use super::error::SchemaError;
use super::{Field, FieldType, NamespaceSchema};

/// The schemas of all namespaces of one pipeline: the contents of the saved schema file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineSchema {
    /// The file format version; this build writes and reads [`PipelineSchema::FORMAT_VERSION`].
    pub format_version: u32,
    /// The workspace the pipeline belongs to.
    pub workspace: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// Each namespace's schema, by namespace name.
    pub namespaces: BTreeMap<String, NamespaceSchema>,
}

impl PipelineSchema {
    /// The format version this build writes and reads.
    pub const FORMAT_VERSION: u32 = 1;

    /// A schema with no namespace yet (before the first `discover` or `sync`).
    pub fn empty(pipeline: &str, workspace: &str) -> Self {
        PipelineSchema {
            format_version: Self::FORMAT_VERSION,
            workspace: workspace.to_owned(),
            pipeline: pipeline.to_owned(),
            namespaces: BTreeMap::new(),
        }
    }

    /// One namespace as pretty JSON: its `namespace` name, then its entry of the saved file
    /// (`records`, `fields`); `None` when the schema has no such namespace.
    pub fn namespace_json(&self, name: &str) -> Option<String> {
        let schema = self.namespaces.get(name)?;
        let mut out = Map::new();
        out.insert("namespace".into(), Value::from(name));
        out.extend(namespace_entry(schema));
        serde_json::to_string_pretty(&Value::Object(out)).ok()
    }

    /// The saved file's text: pretty JSON with keys in a fixed order and a trailing newline.
    /// The same schema always gives the same bytes.
    pub fn to_json_pretty(&self) -> String {
        let mut namespaces = Map::new();
        for (name, schema) in &self.namespaces {
            namespaces.insert(name.clone(), Value::Object(namespace_entry(schema)));
        }
        let mut root = Map::new();
        root.insert("format_version".into(), Value::from(self.format_version));
        root.insert("workspace".into(), Value::from(self.workspace.as_str()));
        root.insert("pipeline".into(), Value::from(self.pipeline.as_str()));
        root.insert("namespaces".into(), Value::Object(namespaces));
        // Serializing a `Value` cannot fail (its keys are strings).
        let mut text = serde_json::to_string_pretty(&Value::Object(root)).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Parse a saved schema file's text. `path_for_errors` only names the file in errors.
    ///
    /// A `format_version` other than 1 is refused with [`SchemaError::UnsupportedVersion`];
    /// anything else malformed (bad JSON, a missing or unknown key, an unknown type, a
    /// duplicate field name) with [`SchemaError::Invalid`] saying where.
    pub fn from_json(text: &str, path_for_errors: &Path) -> Result<Self, SchemaError> {
        let invalid = |message: String| SchemaError::Invalid {
            path: path_for_errors.to_path_buf(),
            message,
        };
        let root: Value =
            serde_json::from_str(text).map_err(|error| invalid(format!("not JSON: {error}")))?;
        let root = root
            .as_object()
            .ok_or_else(|| invalid("the document is not a JSON object".into()))?;
        match root.get("format_version") {
            None => return Err(invalid("missing key `format_version`".into())),
            Some(version) if version.as_u64() == Some(u64::from(Self::FORMAT_VERSION)) => {}
            Some(other) => {
                return Err(SchemaError::UnsupportedVersion {
                    path: path_for_errors.to_path_buf(),
                    found: other.to_string(),
                    supported: Self::FORMAT_VERSION,
                });
            }
        }
        parse_root(root).map_err(invalid)
    }

    /// Write the schema file atomically and durably ([`crate::durable::write_atomic`]): a
    /// temporary file in the same directory is written and synced, renamed over `path`, and
    /// the directory is synced. Missing parent directories are created.
    pub fn save(&self, path: &Path) -> Result<(), SchemaError> {
        crate::durable::write_atomic(path, self.to_json_pretty().as_bytes()).map_err(|e| {
            SchemaError::Io {
                action: e.op,
                path: e.path,
                error: e.source,
            }
        })
    }

    /// Read a saved schema file. A missing file is [`SchemaError::NotFound`].
    pub fn load(path: &Path) -> Result<Self, SchemaError> {
        let text = fs::read_to_string(path).map_err(|error| {
            if error.kind() == io::ErrorKind::NotFound {
                SchemaError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                SchemaError::Io {
                    action: "read",
                    path: path.to_path_buf(),
                    error,
                }
            }
        })?;
        Self::from_json(&text, path)
    }

    /// A readable tree for `skipprd schema`: a header line, then per namespace its name and
    /// record count followed by its fields as `name: type`, nested fields indented by two
    /// spaces below their struct (or list of structs).
    pub fn render_tree(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "pipeline {} (workspace {}), {} namespace{}",
            self.pipeline,
            self.workspace,
            self.namespaces.len(),
            plural(self.namespaces.len() as u64)
        );
        for (name, schema) in &self.namespaces {
            let _ = writeln!(
                out,
                "\n{name} ({} record{})",
                schema.records,
                plural(schema.records)
            );
            if schema.fields.is_empty() {
                out.push_str("  (no fields)\n");
            }
            render_fields(&mut out, &schema.fields, 1);
        }
        out
    }
}

fn plural(count: u64) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// A field name as the tree shows it: as it is, or JSON-quoted (`"new\nline"`) when it would
/// not read as one name on its line (empty, control characters, a `:`, a `"`, or spaces at
/// either end).
fn shown_name(name: &str) -> std::borrow::Cow<'_, str> {
    let plain = !name.is_empty()
        && name.trim() == name
        && !name.chars().any(|c| c.is_control() || c == ':' || c == '"');
    if plain {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(Value::from(name).to_string())
    }
}

fn render_fields(out: &mut String, fields: &[Field], depth: usize) {
    for field in fields {
        let indent = "  ".repeat(depth);
        let _ = writeln!(
            out,
            "{indent}{}: {}",
            shown_name(&field.name),
            field.field_type
        );
        let mut inner = &field.field_type;
        while let FieldType::List(element) = inner {
            inner = element;
        }
        if let FieldType::Struct(children) = inner {
            render_fields(out, children, depth + 1);
        }
    }
}

/// A namespace's entry in the saved file: `records`, `fields`.
fn namespace_entry(schema: &NamespaceSchema) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("records".into(), Value::from(schema.records));
    entry.insert("fields".into(), fields_to_json(&schema.fields));
    entry
}

fn fields_to_json(fields: &[Field]) -> Value {
    Value::Array(
        fields
            .iter()
            .map(|field| {
                let mut object = Map::new();
                object.insert("name".into(), Value::from(field.name.as_str()));
                type_into_json(&field.field_type, &mut object);
                Value::Object(object)
            })
            .collect(),
    )
}

fn type_into_json(field_type: &FieldType, object: &mut Map<String, Value>) {
    object.insert("type".into(), Value::from(field_type.type_name()));
    match field_type {
        FieldType::Struct(fields) => {
            object.insert("fields".into(), fields_to_json(fields));
        }
        FieldType::List(element) => {
            let mut inner = Map::new();
            type_into_json(element, &mut inner);
            object.insert("element".into(), Value::Object(inner));
        }
        FieldType::Decimal { precision, scale } => {
            object.insert("precision".into(), Value::from(*precision));
            object.insert("scale".into(), Value::from(*scale));
        }
        _ => {}
    }
}

fn check_keys(object: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!(
            "unexpected key `{key}` at {at} (expected {})",
            allowed
                .iter()
                .map(|key| format!("`{key}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => Ok(()),
    }
}

fn required<'v>(object: &'v Map<String, Value>, key: &str, at: &str) -> Result<&'v Value, String> {
    object
        .get(key)
        .ok_or_else(|| format!("missing key `{key}` at {at}"))
}

fn string_at(object: &Map<String, Value>, key: &str, at: &str) -> Result<String, String> {
    required(object, key, at)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("`{key}` at {at} must be a string"))
}

fn parse_root(root: &Map<String, Value>) -> Result<PipelineSchema, String> {
    check_keys(
        root,
        &["format_version", "workspace", "pipeline", "namespaces"],
        "the top level",
    )?;
    let workspace = string_at(root, "workspace", "the top level")?;
    let pipeline = string_at(root, "pipeline", "the top level")?;
    let listed = required(root, "namespaces", "the top level")?
        .as_object()
        .ok_or("`namespaces` must be an object")?;
    let mut namespaces = BTreeMap::new();
    for (name, entry) in listed {
        let at = format!("namespaces.{name}");
        let entry = entry
            .as_object()
            .ok_or_else(|| format!("{at} must be an object"))?;
        check_keys(entry, &["records", "fields"], &at)?;
        let records = required(entry, "records", &at)?
            .as_u64()
            .ok_or_else(|| format!("`records` at {at} must be a whole number"))?;
        let fields = parse_fields(required(entry, "fields", &at)?, &format!("{at}.fields"))?;
        namespaces.insert(name.clone(), NamespaceSchema { fields, records });
    }
    Ok(PipelineSchema {
        format_version: PipelineSchema::FORMAT_VERSION,
        workspace,
        pipeline,
        namespaces,
    })
}

fn parse_fields(value: &Value, at: &str) -> Result<Vec<Field>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| format!("{at} must be an array"))?;
    let mut fields: Vec<Field> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let here = format!("{at}[{index}]");
        let object = item
            .as_object()
            .ok_or_else(|| format!("{here} must be an object"))?;
        // Any key of the data is a field name, the empty key too: inference saves it, so
        // refusing it here would stop every later pass.
        let name = string_at(object, "name", &here)?;
        if fields.iter().any(|field| field.name == name) {
            return Err(format!("duplicate field name `{name}` at {here}"));
        }
        let field_type = parse_type(object, &here, true)?;
        fields.push(Field { name, field_type });
    }
    Ok(fields)
}

fn parse_type(object: &Map<String, Value>, at: &str, named: bool) -> Result<FieldType, String> {
    let type_name = string_at(object, "type", at)?;
    let extra: &[&str] = match type_name.as_str() {
        "struct" => &["fields"],
        "list" => &["element"],
        "decimal" => &["precision", "scale"],
        _ => &[],
    };
    let mut allowed = vec!["type"];
    if named {
        allowed.push("name");
    }
    allowed.extend_from_slice(extra);
    check_keys(object, &allowed, at)?;
    match type_name.as_str() {
        "struct" => Ok(FieldType::Struct(parse_fields(
            required(object, "fields", at)?,
            &format!("{at}.fields"),
        )?)),
        "list" => {
            let here = format!("{at}.element");
            let element = required(object, "element", at)?
                .as_object()
                .ok_or_else(|| format!("{here} must be an object"))?;
            Ok(FieldType::List(Box::new(parse_type(element, &here, false)?)))
        }
        "decimal" => {
            let number = |key: &str| -> Result<u32, String> {
                required(object, key, at)?
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("`{key}` at {at} must be a whole number"))
            };
            let (precision, scale) = (number("precision")?, number("scale")?);
            FieldType::decimal(precision, scale).ok_or_else(|| {
                format!(
                    "decimal({precision},{scale}) at {at} is not a decimal type (precision 1 to 38, scale at most the precision)"
                )
            })
        }
        other => FieldType::scalar_from_name(other).ok_or_else(|| {
            format!(
                "unknown type `{other}` at {at} (expected boolean, int, long, double, date, timestamp, timestamp_ms, decimal, string, struct or list)"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PipelineSchema {
        let customer = FieldType::Struct(vec![
            Field::new(
                "address",
                FieldType::Struct(vec![Field::new("city", FieldType::String)]),
            ),
            Field::new("since", FieldType::Date),
        ]);
        let items = FieldType::List(Box::new(FieldType::Struct(vec![
            Field::new("qty", FieldType::Int),
            Field::new("sku", FieldType::String),
        ])));
        let mut namespaces = BTreeMap::new();
        namespaces.insert(
            "orders".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new("at", FieldType::Timestamp),
                    Field::new("customer", customer),
                    Field::new("items", items),
                    Field::new(
                        "matrix",
                        FieldType::List(Box::new(FieldType::List(Box::new(FieldType::Double)))),
                    ),
                    Field::new("price", FieldType::Double),
                    Field::new("price_string", FieldType::String),
                ],
                records: 2,
            },
        );
        namespaces.insert(
            "clicks".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new("id", FieldType::Long),
                    Field::new("ok", FieldType::Boolean),
                    Field::new("ts", FieldType::TimestampMs),
                    Field::new("n", FieldType::Int),
                ],
                records: 1,
            },
        );
        namespaces.insert("empty".to_owned(), NamespaceSchema::default());
        PipelineSchema {
            format_version: 1,
            workspace: "acme".into(),
            pipeline: "shop".into(),
            namespaces,
        }
    }

    #[test]
    fn to_json_pretty_round_trips_through_from_json() {
        let schema = sample();
        let text = schema.to_json_pretty();
        let back = PipelineSchema::from_json(&text, Path::new("s.json")).unwrap();
        assert_eq!(back, schema);
        assert_eq!(back.to_json_pretty(), text);
    }

    /// Inference saves any key of the data, the empty key and control characters too; the
    /// file must load back (on the old main it did not, and every later pass stopped).
    #[test]
    fn hostile_keys_round_trip() {
        let mut schema = sample();
        schema.namespaces.insert(
            "keys".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new("", FieldType::String),
                    Field::new("new\nline", FieldType::String),
                ],
                records: 1,
            },
        );
        let text = schema.to_json_pretty();
        let back = PipelineSchema::from_json(&text, Path::new("s.json")).unwrap();
        assert_eq!(back, schema);
    }

    #[test]
    fn the_saved_format_is_pinned_by_this_golden_text() {
        let mut namespaces = BTreeMap::new();
        namespaces.insert(
            "orders".to_owned(),
            NamespaceSchema {
                fields: vec![
                    Field::new(
                        "customer",
                        FieldType::Struct(vec![Field::new("since", FieldType::Date)]),
                    ),
                    Field::new("price", FieldType::Double),
                    Field::new("price_string", FieldType::String),
                    Field::new("tags", FieldType::List(Box::new(FieldType::String))),
                ],
                records: 2,
            },
        );
        let schema = PipelineSchema {
            format_version: 1,
            workspace: "acme".into(),
            pipeline: "shop-events".into(),
            namespaces,
        };
        let golden = r#"{
  "format_version": 1,
  "workspace": "acme",
  "pipeline": "shop-events",
  "namespaces": {
    "orders": {
      "records": 2,
      "fields": [
        {
          "name": "customer",
          "type": "struct",
          "fields": [
            {
              "name": "since",
              "type": "date"
            }
          ]
        },
        {
          "name": "price",
          "type": "double"
        },
        {
          "name": "price_string",
          "type": "string"
        },
        {
          "name": "tags",
          "type": "list",
          "element": {
            "type": "string"
          }
        }
      ]
    }
  }
}
"#;
        assert_eq!(schema.to_json_pretty(), golden);
        // The example in the module docs is this same text.
        let docs = include_str!("mod.rs");
        let doc_example: String = docs
            .lines()
            .skip_while(|line| *line != "//! ```json")
            .skip(1)
            .take_while(|line| *line != "//! ```")
            .map(|line| {
                format!(
                    "{}\n",
                    line.trim_start_matches("//!")
                        .strip_prefix(' ')
                        .unwrap_or("")
                )
            })
            .collect();
        assert_eq!(doc_example, golden);
    }

    #[test]
    fn decimals_round_trip_with_their_precision_and_scale() {
        let mut schema = PipelineSchema::empty("p", "w");
        schema.namespaces.insert(
            "n".into(),
            NamespaceSchema {
                fields: vec![Field::new("price", FieldType::decimal(12, 3).unwrap())],
                records: 1,
            },
        );
        let text = schema.to_json_pretty();
        assert!(text.contains("\"precision\": 12"), "{text}");
        assert_eq!(
            PipelineSchema::from_json(&text, Path::new("s.json")).unwrap(),
            schema
        );
        let bad = text.replace("\"scale\": 3", "\"scale\": 13");
        let error = PipelineSchema::from_json(&bad, Path::new("s.json")).unwrap_err();
        assert!(error.to_string().contains("decimal(12,13)"), "{error}");
    }

    #[test]
    fn an_unknown_format_version_is_refused_with_a_clear_message() {
        let text = r#"{"format_version": 2, "workspace": "a", "pipeline": "b", "namespaces": {}}"#;
        let error = PipelineSchema::from_json(text, Path::new("/x/schema.json")).unwrap_err();
        assert!(matches!(error, SchemaError::UnsupportedVersion { .. }));
        let message = error.to_string();
        assert!(message.contains("format_version 2"), "{message}");
        assert!(message.contains("only version 1"), "{message}");
        assert!(message.contains("/x/schema.json"), "{message}");
    }

    #[test]
    fn malformed_files_are_reported_with_the_place_of_the_problem() {
        let path = Path::new("s.json");
        let cases = [
            ("not json", "not JSON"),
            (r#"{"workspace": "a"}"#, "missing key `format_version`"),
            (
                r#"{"format_version": 1, "workspace": "a", "pipeline": "b", "namespaces": {"n": {"records": 1, "fields": [{"name": "x", "type": "integer"}]}}}"#,
                "unknown type `integer` at namespaces.n.fields[0]",
            ),
            (
                r#"{"format_version": 1, "workspace": "a", "pipeline": "b", "namespaces": {"n": {"records": 1, "fields": [{"name": "x", "type": "int", "extra": 1}]}}}"#,
                "unexpected key `extra` at namespaces.n.fields[0]",
            ),
            (
                r#"{"format_version": 1, "workspace": "a", "pipeline": "b", "namespaces": {"n": {"records": 1, "fields": [{"name": "x", "type": "int"}, {"name": "x", "type": "long"}]}}}"#,
                "duplicate field name `x` at namespaces.n.fields[1]",
            ),
            (
                r#"{"format_version": 1, "workspace": "a", "pipeline": "b", "namespaces": {"n": {"records": 1, "fields": [{"name": "l", "type": "list"}]}}}"#,
                "missing key `element` at namespaces.n.fields[0]",
            ),
        ];
        for (text, expected) in cases {
            let error = PipelineSchema::from_json(text, path).unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains(expected),
                "{message} should contain {expected}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn save_writes_atomically_and_load_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("schema.json");
        let schema = sample();
        schema.save(&path).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), schema.to_json_pretty());
        assert_eq!(PipelineSchema::load(&path).unwrap(), schema);
        // Saving again replaces the file and leaves no temporary file behind.
        schema.save(&path).unwrap();
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["schema.json"]);
    }

    #[test]
    fn loading_a_missing_file_says_to_run_discover() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("schema.json");
        let error = PipelineSchema::load(&path).unwrap_err();
        assert!(matches!(error, SchemaError::NotFound { .. }));
        assert!(error.to_string().contains("run `skipprd discover` first"));
    }

    /// Regression (found by an outside-in probe): a key holding a newline was printed raw,
    /// breaking the tree into a line that looked like another field.
    #[test]
    fn render_tree_quotes_names_that_would_not_read_as_one() {
        let mut schema = PipelineSchema::empty("p", "w");
        schema.namespaces.insert(
            "t".into(),
            NamespaceSchema {
                fields: vec![
                    Field::new("", FieldType::Long),
                    Field::new(" pad", FieldType::Long),
                    Field::new("a: b", FieldType::Long),
                    Field::new("new\nline", FieldType::Long),
                    Field::new("plain name.x", FieldType::Long),
                ],
                records: 1,
            },
        );
        let tree = schema.render_tree();
        let fields: Vec<&str> = tree.lines().skip(3).collect();
        assert_eq!(
            fields,
            [
                "  \"\": long",
                "  \" pad\": long",
                "  \"a: b\": long",
                "  \"new\\nline\": long",
                "  plain name.x: long",
            ]
        );
    }

    #[test]
    fn render_tree_shows_counts_and_indents_nested_fields() {
        let expected = "\
pipeline shop (workspace acme), 3 namespaces

clicks (1 record)
  id: long
  ok: boolean
  ts: timestamp_ms
  n: int

empty (0 records)
  (no fields)

orders (2 records)
  at: timestamp
  customer: struct
    address: struct
      city: string
    since: date
  items: list<struct>
    qty: int
    sku: string
  matrix: list<list<double>>
  price: double
  price_string: string
";
        assert_eq!(sample().render_tree(), expected);
    }
}
