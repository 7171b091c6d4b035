use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::*;

/// The hostile values every name must survive.
fn hostile() -> Vec<String> {
    vec![
        String::new(),
        "!!!".into(),
        "заказ".into(),
        "注文".into(),
        "a".repeat(300),
        "a".repeat(1100),
        "é".repeat(700),
        "nul\0byte".into(),
        "tab\there".into(),
        "new\nline".into(),
        "../../x".into(),
        "/".into(),
        "..".into(),
        "%2F".into(),
        "a=b".into(),
        "_deadletters".into(),
        "_replayed".into(),
        "_read_end".into(),
    ]
}

fn valid_table(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TABLE_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn valid_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= MAX_SEGMENT_BYTES
        && segment != "."
        && segment != ".."
        && !segment.contains('/')
        && !segment.chars().any(char::is_control)
}

#[test]
fn hostile_namespace_values_become_valid_distinct_table_names() {
    let names: Vec<String> = hostile().iter().map(|raw| table_name(raw)).collect();
    for (raw, name) in hostile().iter().zip(&names) {
        assert!(valid_table(name), "{raw:?} -> {name:?}");
        // Never a bookkeeping part's reserved name.
        assert_ne!(name, crate::wal::DEADLETTERS_PART);
        assert_ne!(name, crate::wal::REPLAYED_PART);
        assert_ne!(name, crate::wal::READ_END_PART);
    }
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    // A long value keeps what fits of its readable part, then the hash.
    assert_eq!(names[4].len(), MAX_TABLE_NAME_BYTES);
    assert!(names[4].starts_with(&"a".repeat(100)), "{}", names[4]);
}

#[test]
fn the_table_name_rule_is_unchanged_for_names_that_fit() {
    assert_eq!(table_name("  Hello -- World  "), "hello_world");
    assert_eq!(table_name("Dock Event"), "dock_event");
    assert_eq!(table_name("app/v2:Page-View"), "app_v2_page_view");
    assert_eq!(table_name(""), "_cbf29ce4");
    assert_eq!(table_name("Ünïcode"), "n_code_2b3811cd");
    assert_eq!(table_name("!!!"), "_bbe43c17");
    assert_eq!(table_name("заказ"), "_6ac57791");
    let exact = "a".repeat(MAX_TABLE_NAME_BYTES);
    assert_eq!(table_name(&exact), exact);
    assert_ne!(table_name(&format!("{exact}a")), exact);
}

#[test]
fn column_names_escape_control_characters_and_bound_the_length() {
    assert_eq!(column_name("userId"), "userId");
    assert_eq!(column_name("a b.c"), "a b.c");
    assert_eq!(column_name("new\nline"), "new%0Aline");
    assert_eq!(column_name("tab\t"), "tab%09");
    assert_eq!(column_name("nul\0"), "nul%00");
    assert_eq!(column_name("50%"), "50%25");
    assert_eq!(column_name(""), "_cbf29ce4");
    let long = column_name(&"k".repeat(300));
    assert!(long.len() <= MAX_COLUMN_NAME_BYTES, "{}", long.len());
    assert!(long.starts_with(&"k".repeat(200)));
    assert_ne!(long, column_name(&"k".repeat(301)));
}

#[test]
fn nested_field_names_cannot_break_a_hive_type_string() {
    assert_eq!(nested_field_name("zone"), "zone");
    assert_eq!(nested_field_name("a:b,c<d>"), "a%3Ab%2Cc%3Cd%3E");
    assert_eq!(nested_field_name("a b"), "a%20b");
    assert_eq!(nested_field_name("`x`"), "%60x%60");
}

#[test]
fn partition_segments_escape_as_hive_does_and_stay_one_segment() {
    assert_eq!(partition_segment("region", Some("eu")), "region=eu");
    assert_eq!(
        partition_segment("region", Some("../../../../x")),
        "region=..%2F..%2F..%2F..%2Fx"
    );
    assert_eq!(partition_segment("region", Some("a=b")), "region=a%3Db");
    assert_eq!(partition_segment("region", Some("nul\0")), "region=nul%00");
    assert_eq!(partition_segment("region", Some("100%")), "region=100%25");
    assert_eq!(partition_segment("region", Some("заказ")), "region=заказ");
    assert_eq!(partition_segment("region", None), "region=null");
    let long = partition_segment("region", Some(&"/".repeat(300)));
    assert!(valid_segment(&long), "{long}");
    assert!(!long.contains("%2_"), "an escape was cut: {long}");
    for raw in hostile() {
        let segment = partition_segment("region", Some(&raw));
        assert!(valid_segment(&segment), "{raw:?} -> {segment:?}");
    }
}

#[test]
fn a_cut_never_splits_an_escape_or_a_character() {
    for pad in 0..6 {
        let raw = format!("{}{}", "x".repeat(pad), "\n".repeat(200));
        let name = column_name(&raw);
        let body = &name[..name.len() - 9];
        assert!(body.len() % 3 == pad % 3 || body.ends_with("%0A"), "{name}");
        assert!(!body.ends_with('%') && !body.ends_with("%0"), "{name}");
    }
    let name = column_name(&"ж".repeat(200));
    assert!(name.len() <= MAX_COLUMN_NAME_BYTES);
}

proptest! {
    #[test]
    fn every_name_is_valid_and_stable(raw in any::<String>()) {
        let table = table_name(&raw);
        prop_assert!(valid_table(&table), "{:?} -> {:?}", raw, table);
        prop_assert_eq!(&table, &table_name(&raw));
        let column = column_name(&raw);
        prop_assert!(!column.is_empty() && column.len() <= MAX_COLUMN_NAME_BYTES);
        prop_assert!(!column.chars().any(char::is_control));
        let nested = nested_field_name(&raw);
        prop_assert!(!nested.is_empty() && nested.len() <= MAX_COLUMN_NAME_BYTES);
        prop_assert!(!nested.contains([':', ',', '<', '>', '`', ' ']));
        let segment = partition_segment("p", Some(&raw));
        prop_assert!(valid_segment(&segment), "{:?} -> {:?}", raw, segment);
    }

    #[test]
    fn long_hostile_values_are_bounded(raw in "[\\x00-\\x7f\u{400}-\u{4ff}\u{4e00}-\u{4e20}]{200,1200}") {
        prop_assert!(valid_table(&table_name(&raw)));
        prop_assert!(column_name(&raw).len() <= MAX_COLUMN_NAME_BYTES);
        prop_assert!(valid_segment(&partition_segment("p", Some(&raw))));
    }
}

/// Distinct values get distinct names: 20,000 generated values that the table rule does not
/// fold together (they differ in more than case and separators) and 20,000 keys give no
/// collision. With a 32-bit hash the chance of one among n lossy names is about n²/2³³.
#[test]
fn distinct_values_get_distinct_names() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::string::string_regex("[a-zA-Z0-9 _\\-.!?é日\u{0}\t\n]{0,40}")
        .expect("a valid regex");
    let mut tables: BTreeMap<String, String> = BTreeMap::new();
    let mut columns: BTreeMap<String, String> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 20_000 {
        let raw = strategy.new_tree(&mut runner).expect("a value").current();
        if !seen.insert(raw.clone()) {
            continue;
        }
        let column = column_name(&raw);
        if let Some(other) = columns.insert(column.clone(), raw.clone()) {
            panic!("{other:?} and {raw:?} share the column {column:?}");
        }
        // The documented folding: ASCII case, separator runs, leading and trailing `_`.
        let folded: String = raw
            .to_ascii_lowercase()
            .split([' ', '-', '.', '/', ':', '_'])
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let table = table_name(&raw);
        match tables.get(&table) {
            Some(other) if *other != folded => {
                panic!("{other:?} and {raw:?} share the table {table:?}")
            }
            _ => {
                tables.insert(table, folded);
            }
        }
    }
}

#[test]
fn a_partition_segment_gives_back_its_value_unless_it_was_cut() {
    for value in hostile() {
        let segment = partition_segment("key", Some(&value));
        // The text `null` is the null's directory too (Hive's own convention differs).
        if value != "null" && segment.len() < MAX_SEGMENT_BYTES - SUFFIX_BYTES {
            assert_eq!(
                partition_segment_value(&segment),
                Some(Some(value.clone())),
                "{segment}"
            );
        }
    }
    assert_eq!(
        partition_segment_value("a%3Db=x%2F%25y"),
        Some(Some("x/%y".into()))
    );
    assert_eq!(partition_segment_value("key=null"), Some(None));
    assert_eq!(partition_segment_value("key=%zz"), Some(Some("%zz".into())));
    assert_eq!(partition_segment_value("no-separator"), None);
}

#[test]
fn an_undotted_name_has_no_dot_and_gives_its_key_back() {
    assert_eq!(undotted_name("a.b"), "a%2Eb");
    assert_eq!(undotted_name("50%.x"), "50%25%2Ex");
    assert_eq!(dotted_key("a%2Eb").as_deref(), Some("a.b"));
    assert_eq!(dotted_key("50%25%2Ex").as_deref(), Some("50%.x"));
    // Not undotted names: no `%2E`, a stray `%`, or a `.` left.
    assert_eq!(dotted_key("a%25b"), None);
    assert_eq!(dotted_key("a%2Eb%"), None);
    assert_eq!(dotted_key("a%2Eb%41"), None);
    assert_eq!(dotted_key("a.b%2Ec"), None);
}

proptest! {
    #[test]
    fn undotting_is_reversible_for_any_dotted_key(head in ".*", tail in ".*") {
        let key = format!("{head}.{tail}");
        let name = undotted_name(&key);
        prop_assert!(!name.contains('.'));
        prop_assert_eq!(dotted_key(&name), Some(key));
    }
}
