//! Routing records to namespaces, and flattening nested objects into dotted columns.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// How records are shaped and routed before typing. See the [module docs](super) for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformOptions {
    /// The namespace for every record when `namespace_fields` is empty, and for records that
    /// lack (or have null in) a namespace field.
    pub default_namespace: String,
    /// Dot paths (`a.b.c`, through nested objects) whose values name a record's namespace.
    /// Several fields make a composite name joined with `_`.
    pub namespace_fields: Vec<String>,
    /// Turn nested objects into dotted top-level columns (`a.b.c`); lists stay lists.
    pub flatten_events: bool,
    /// The most namespaces one inference may create (1000 by default).
    pub max_namespaces: usize,
    /// The most distinct keys an object may have before it is treated as a map (1000 by
    /// default). Nested objects with more keys (all keys seen at that place together) are
    /// kept as JSON text in a `string` field; a namespace with more distinct top-level
    /// fields is an error.
    pub max_fields_per_struct: usize,
    /// The columns records are merged by (`write_policy: merge_by_key`), by namespace.
    pub merge_keys: MergeKeys,
}

/// The key columns a namespace's rows are merged by (`write_policy: merge_by_key` with
/// `primary_key`). Typing refuses a record of such a namespace with no value of its own in a
/// key column (see [`super::RecordBatchBuilder::with_merge_key`]), and inference prefers a
/// scalar type for a key column (see [the module docs](super)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeKeys {
    /// The key columns (top-level field names).
    pub columns: Vec<String>,
    /// Whether a namespace not in `namespaces` is merged.
    pub default: bool,
    /// Namespaces merged (`true`) or not (`false`) whatever `default` says.
    pub namespaces: BTreeMap<String, bool>,
}

impl MergeKeys {
    /// The key columns of `namespace` (empty: its rows are not merged by key).
    pub fn of(&self, namespace: &str) -> &[String] {
        if self
            .namespaces
            .get(namespace)
            .copied()
            .unwrap_or(self.default)
        {
            &self.columns
        } else {
            &[]
        }
    }
}

impl TransformOptions {
    /// The default limit on namespaces.
    pub const DEFAULT_MAX_NAMESPACES: usize = 1000;
    /// The default limit on the distinct keys of one object (see `max_fields_per_struct`).
    pub const DEFAULT_MAX_FIELDS_PER_STRUCT: usize = 1000;
}

impl Default for TransformOptions {
    /// Everything into the namespace `default`, no flattening, at most 1000 namespaces and
    /// 1000 fields per struct.
    fn default() -> Self {
        TransformOptions {
            default_namespace: "default".to_owned(),
            namespace_fields: Vec::new(),
            flatten_events: false,
            max_namespaces: Self::DEFAULT_MAX_NAMESPACES,
            max_fields_per_struct: Self::DEFAULT_MAX_FIELDS_PER_STRUCT,
            merge_keys: MergeKeys::default(),
        }
    }
}

/// The namespace a record belongs to under `options` (see the [module docs](super)).
///
/// Without namespace fields this is `options.default_namespace`. Otherwise it is the value at
/// each dot path (strings as they are, numbers and booleans as their JSON text), joined with
/// `_` and sanitized to a table-safe name; a record where any of the paths is missing, null,
/// an object or an array goes to `options.default_namespace`.
pub fn namespace_for(record: &Map<String, Value>, options: &TransformOptions) -> String {
    route(record, options).into_owned()
}

/// [`namespace_for`] without allocating in the common default case.
pub(crate) fn route<'a>(
    record: &Map<String, Value>,
    options: &'a TransformOptions,
) -> Cow<'a, str> {
    route_or(record, options, None)
}

/// The namespace of a record read from a source: [`namespace_for`], with the namespace the
/// source named for it (see [`crate::sources::SourceRecord::namespace`]) in place of
/// `options.default_namespace`.
pub fn namespace_for_record(
    record: &crate::sources::SourceRecord,
    options: &TransformOptions,
) -> String {
    route_or(&record.value, options, record.namespace.as_deref()).into_owned()
}

/// [`route`], with `default` (when given) in place of `options.default_namespace`.
pub(crate) fn route_or<'a>(
    record: &Map<String, Value>,
    options: &'a TransformOptions,
    default: Option<&'a str>,
) -> Cow<'a, str> {
    let default = default.unwrap_or(&options.default_namespace);
    if options.namespace_fields.is_empty() {
        return Cow::Borrowed(default);
    }
    let mut joined = String::new();
    for (index, path) in options.namespace_fields.iter().enumerate() {
        let Some(value) = lookup_path(record, path) else {
            return Cow::Borrowed(default);
        };
        if index > 0 {
            joined.push('_');
        }
        match value {
            Value::String(text) => joined.push_str(text),
            Value::Number(number) => joined.push_str(&number.to_string()),
            Value::Bool(flag) => joined.push_str(if *flag { "true" } else { "false" }),
            Value::Null | Value::Object(_) | Value::Array(_) => {
                return Cow::Borrowed(default);
            }
        }
    }
    Cow::Owned(sanitize_namespace(&joined))
}

/// Follow a dot path through nested objects.
fn lookup_path<'r>(record: &'r Map<String, Value>, path: &str) -> Option<&'r Value> {
    let mut parts = path.split('.');
    let mut current = record.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

/// Make a table-safe name: the naming policy's [`table_name`](super::naming::table_name)
/// (see there and the [module docs](super) for the rule).
pub fn sanitize_namespace(raw: &str) -> String {
    super::naming::table_name(raw)
}

/// Flatten nested objects into dotted keys (`{"a":{"b":1}}` -> `a.b`). Lists and scalars are
/// kept as they are; an empty object contributes no key. When two keys end up with the same
/// dotted name (a literal `"a.b"` key next to `{"a":{"b":..}}`), the one later in the record wins.
pub(crate) fn flatten(record: &Map<String, Value>) -> BTreeMap<String, &Value> {
    let mut out = BTreeMap::new();
    let mut prefix = String::new();
    flatten_into(record, &mut prefix, &mut out);
    out
}

fn flatten_into<'r>(
    object: &'r Map<String, Value>,
    prefix: &mut String,
    out: &mut BTreeMap<String, &'r Value>,
) {
    for (key, value) in object {
        let mark = prefix.len();
        if mark > 0 {
            prefix.push('.');
        }
        prefix.push_str(key);
        match value {
            Value::Object(child) => flatten_into(child, prefix, out),
            other => {
                out.insert(prefix.clone(), other);
            }
        }
        prefix.truncate(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn options(fields: &[&str]) -> TransformOptions {
        TransformOptions {
            default_namespace: "events".into(),
            namespace_fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            ..TransformOptions::default()
        }
    }

    #[test]
    fn without_namespace_fields_every_record_goes_to_the_default_namespace() {
        let record = object(json!({"type": "click"}));
        assert_eq!(namespace_for(&record, &options(&[])), "events");
    }

    #[test]
    fn a_single_field_names_the_namespace_after_sanitizing() {
        let record = object(json!({"type": "Page View"}));
        assert_eq!(namespace_for(&record, &options(&["type"])), "page_view");
    }

    #[test]
    fn a_nested_dot_path_is_followed_through_objects() {
        let record = object(json!({"meta": {"kind": {"name": "Order"}}}));
        assert_eq!(
            namespace_for(&record, &options(&["meta.kind.name"])),
            "order"
        );
    }

    #[test]
    fn composite_fields_join_with_underscore_and_numbers_become_text() {
        let record = object(json!({"source": "Web", "version": 2, "beta": true}));
        assert_eq!(
            namespace_for(&record, &options(&["source", "version", "beta"])),
            "web_2_true"
        );
    }

    #[test]
    fn a_missing_null_or_nested_value_routes_to_the_default_namespace() {
        let opts = options(&["type", "version"]);
        assert_eq!(
            namespace_for(&object(json!({"type": "a"})), &opts),
            "events"
        );
        assert_eq!(
            namespace_for(&object(json!({"type": "a", "version": null})), &opts),
            "events"
        );
        assert_eq!(
            namespace_for(&object(json!({"type": {"x": 1}, "version": 1})), &opts),
            "events"
        );
    }

    #[test]
    fn sanitizing_collapses_separator_runs_and_trims_underscores() {
        assert_eq!(sanitize_namespace("  Hello -- World  "), "hello_world");
        assert_eq!(sanitize_namespace("__a__b__"), "a__b");
        assert_eq!(sanitize_namespace("v1.2"), "v1_2");
        assert_eq!(sanitize_namespace("Dock Event"), "dock_event");
        assert_eq!(sanitize_namespace("app/v2:Page-View"), "app_v2_page_view");
    }

    #[test]
    fn the_hash_is_fnv_1a_64_so_names_are_the_same_in_every_run() {
        use crate::schema::naming::fnv1a_64;
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(sanitize_namespace(""), "_cbf29ce4");
        // The examples in the module docs.
        assert_eq!(sanitize_namespace("Ünïcode"), "n_code_2b3811cd");
        assert_eq!(sanitize_namespace("ÄÖ"), "_b99320c6");
        assert_eq!(sanitize_namespace("!!!"), "_bbe43c17");
    }

    #[test]
    fn values_that_sanitize_with_loss_get_a_hash_suffix_so_they_never_share_a_namespace() {
        let lossy = [
            "ÄÖ",
            "ÜÖ",
            "!!!",
            "???",
            "",
            "_",
            "___",
            "Ünïcode",
            "Ünïcöde",
            "a!",
            "a?",
        ];
        let names: Vec<String> = lossy.iter().map(|raw| sanitize_namespace(raw)).collect();
        for (raw, name) in lossy.iter().zip(&names) {
            assert_eq!(
                name.len() - name.trim_end_matches(|c: char| c.is_ascii_hexdigit()).len(),
                8,
                "{raw} -> {name}"
            );
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
        }
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), lossy.len(), "{names:?}");
        // What can be kept is kept, in front of the hash.
        assert!(names[7].starts_with("n_code_"), "{}", names[7]);
        assert!(names[9].starts_with("a_"), "{}", names[9]);
        // A lossless name never gets a hash.
        assert_eq!(sanitize_namespace("Order_2"), "order_2");
    }

    #[test]
    fn flattening_makes_dotted_keys_and_keeps_lists_whole() {
        let record = object(json!({
            "a": {"b": {"c": 1}, "d": "x"},
            "list": [{"inner": {"deep": 1}}],
            "empty": {},
            "top": null
        }));
        let flat = flatten(&record);
        let keys: Vec<&str> = flat.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a.b.c", "a.d", "list", "top"]);
        assert_eq!(flat["list"], &json!([{"inner": {"deep": 1}}]));
    }

    #[test]
    fn flattening_lets_the_later_of_two_colliding_keys_win() {
        let record = object(json!({"a.b": 1, "a": {"b": 2}}));
        assert_eq!(flatten(&record)["a.b"], &json!(2));
    }
}
