use super::*;
use proptest::prelude::*;
use serde_json::json;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// Infer the default namespace's fields from these records.
fn infer_with(options: TransformOptions, records: &[Value]) -> Vec<Field> {
    let mut inferrer = SchemaInferrer::new(options.clone());
    for record in records {
        inferrer.add(&object(record.clone())).unwrap();
    }
    let mut schema = inferrer.finish("p", "w");
    schema
        .namespaces
        .remove(&options.default_namespace)
        .map(|ns| ns.fields)
        .unwrap_or_default()
}

fn infer(records: &[Value]) -> Vec<Field> {
    infer_with(TransformOptions::default(), records)
}

/// The type of field `x` when it takes each of these values in turn.
fn type_of_x(values: &[Value]) -> FieldType {
    let records: Vec<Value> = values.iter().map(|value| json!({ "x": value })).collect();
    let fields = infer(&records);
    assert_eq!(fields.len(), 1, "expected just `x`, got {fields:?}");
    fields[0].field_type.clone()
}

fn field(name: &str, field_type: FieldType) -> Field {
    Field::new(name, field_type)
}

fn list(element: FieldType) -> FieldType {
    FieldType::List(Box::new(element))
}

#[test]
fn booleans_infer_boolean() {
    assert_eq!(type_of_x(&[json!(true), json!(false)]), FieldType::Boolean);
}

#[test]
fn integers_within_32_bits_infer_int_up_to_both_edges() {
    assert_eq!(
        type_of_x(&[json!(i32::MIN), json!(i32::MAX), json!(0)]),
        FieldType::Int
    );
}

#[test]
fn integers_one_past_either_32_bit_edge_infer_long() {
    // 2^31 alone would read as Unix seconds (2038), so pair it with a small number.
    assert_eq!(
        type_of_x(&[json!(0), json!(i64::from(i32::MAX) + 1)]),
        FieldType::Long
    );
    assert_eq!(
        type_of_x(&[json!(i64::from(i32::MIN) - 1)]),
        FieldType::Long
    );
    assert_eq!(type_of_x(&[json!(1), json!(i64::MAX)]), FieldType::Long);
}

#[test]
fn decimals_infer_double_and_absorb_integers() {
    assert_eq!(type_of_x(&[json!(1.5)]), FieldType::Double);
    assert_eq!(type_of_x(&[json!(1), json!(2.5)]), FieldType::Double);
    assert_eq!(type_of_x(&[json!(1.0)]), FieldType::Double);
}

/// An integer from 2^63 to 2^64 - 1 is read exactly, but a double would round it: it counts
/// as text, so its digits are kept (it was a double, silently rounded).
#[test]
fn integers_past_i64_that_a_double_would_round_count_as_text() {
    assert_eq!(type_of_x(&[json!(u64::MAX)]), FieldType::String);
    assert_eq!(type_of_x(&[json!(i64::MAX as u64 + 1)]), FieldType::String);
    assert_eq!(type_of_x(&[json!(i64::MAX)]), FieldType::Long);
}

#[test]
fn unix_seconds_from_2010_up_to_2100_infer_timestamp_with_exact_edges() {
    assert_eq!(type_of_x(&[json!(1_262_304_000)]), FieldType::Timestamp);
    assert_eq!(type_of_x(&[json!(4_102_444_799_i64)]), FieldType::Timestamp);
    assert_eq!(type_of_x(&[json!(1_262_303_999)]), FieldType::Int);
    assert_eq!(type_of_x(&[json!(4_102_444_800_i64)]), FieldType::Long);
}

#[test]
fn unix_milliseconds_from_2010_up_to_2040_infer_timestamp_ms_with_exact_edges() {
    assert_eq!(
        type_of_x(&[json!(1_262_304_000_000_i64)]),
        FieldType::TimestampMs
    );
    assert_eq!(
        type_of_x(&[json!(2_208_988_799_999_i64)]),
        FieldType::TimestampMs
    );
    assert_eq!(type_of_x(&[json!(1_262_303_999_999_i64)]), FieldType::Long);
    assert_eq!(type_of_x(&[json!(2_208_988_800_000_i64)]), FieldType::Long);
}

#[test]
fn one_integer_outside_the_timestamp_range_makes_the_field_a_plain_integer() {
    assert_eq!(type_of_x(&[json!(1_700_000_000), json!(5)]), FieldType::Int);
    assert_eq!(
        type_of_x(&[json!(1_700_000_000_000_i64), json!(1_700_000_000)]),
        FieldType::Long
    );
}

#[test]
fn valid_dates_infer_date_but_impossible_or_odd_dates_stay_string() {
    assert_eq!(
        type_of_x(&[json!("2024-02-29"), json!("1999-12-31")]),
        FieldType::Date
    );
    assert_eq!(type_of_x(&[json!("2023-02-30")]), FieldType::String);
    assert_eq!(type_of_x(&[json!("2023-02-29")]), FieldType::String);
    assert_eq!(type_of_x(&[json!("2023-2-28")]), FieldType::String);
    assert_eq!(
        type_of_x(&[json!("2023-02-28T00:00:00Z")]),
        FieldType::String
    );
    assert_eq!(
        type_of_x(&[json!("2023-02-28"), json!("hello")]),
        FieldType::String
    );
}

#[test]
fn nulls_only_infer_string_and_nulls_never_change_a_type() {
    assert_eq!(type_of_x(&[json!(null), json!(null)]), FieldType::String);
    assert_eq!(
        type_of_x(&[json!(null), json!(3), json!(null)]),
        FieldType::Int
    );
}

#[test]
fn numeric_strings_alone_stay_string() {
    assert_eq!(type_of_x(&[json!("12"), json!("3.5")]), FieldType::String);
}

#[test]
fn numbers_with_only_numeric_strings_fold_into_double_without_a_sibling() {
    assert_eq!(
        type_of_x(&[json!(1), json!("2.5"), json!("-3e2")]),
        FieldType::Double
    );
}

#[test]
fn a_non_numeric_string_among_numbers_goes_to_a_string_sibling_not_an_error() {
    let fields = infer(&[
        json!({"price": 9.5}),
        json!({"price": "n/a"}),
        json!({"price": "7"}),
    ]);
    assert_eq!(
        fields,
        [
            field("price", FieldType::Double),
            field("price_string", FieldType::String)
        ]
    );
}

#[test]
fn only_the_three_spellings_of_non_finite_floats_are_numeric_strings() {
    for word in [
        "nan",
        "NAN",
        "inf",
        "-inf",
        "+Infinity",
        "infinity",
        "-infinity",
        "1e999",
        "",
        "1e",
        "e5",
        "--1",
    ] {
        assert_eq!(parse_numeric(word), None, "{word}");
    }
    assert!(parse_numeric("NaN").is_some_and(f64::is_nan));
    assert_eq!(parse_numeric("Infinity"), Some(f64::INFINITY));
    assert_eq!(parse_numeric("-Infinity"), Some(f64::NEG_INFINITY));
    assert_eq!(
        type_of_x(&[json!(1.5), json!("NaN"), json!("-Infinity"), json!(null)]),
        FieldType::Double
    );
    assert_eq!(
        type_of_x(&[json!("NaN"), json!("Infinity")]),
        FieldType::String
    );
    assert_eq!(parse_numeric("0.5"), Some(0.5));
    assert_eq!(parse_numeric("1E3"), Some(1000.0));
    assert_eq!(parse_numeric("-12"), Some(-12.0));
    assert_eq!(
        parse_numeric("9007199254740992"),
        Some(9_007_199_254_740_992.0)
    );
}

#[test]
fn only_strings_a_double_keeps_exactly_fold_into_numbers() {
    // Found by an outside-in probe: `"007"` landed as 7.0 and a 20-digit id was rounded.
    for text in [
        "007",
        "+15",
        ".5",
        "1.",
        "0x10",
        "-0",
        "1e400",
        "9007199254740993",
        "99999999999999999999",
        "12345678901234567890123",
        " 42",
    ] {
        assert_eq!(parse_numeric(text), None, "{text}");
    }
    let fields = infer(&[
        json!({"zip": 100, "v": 2}),
        json!({"zip": "007", "v": "1.5"}),
        json!({"zip": "+15", "v": "99999999999999999999"}),
    ]);
    assert_eq!(
        fields,
        [
            field("v", FieldType::Int),
            field("v_string", FieldType::String),
            field("zip", FieldType::Int),
            field("zip_string", FieldType::String),
        ]
    );
    let fields = infer(&[json!({"p": 1}), json!({"p": "2.50"}), json!({"p": "-3"})]);
    assert_eq!(fields, [field("p", FieldType::Double)]);
}

#[test]
fn conflicting_kinds_pick_the_main_column_by_precedence_and_name_siblings_by_type() {
    let fields = infer(&[
        json!({"v": {"a": 1}}),
        json!({"v": [1, 2]}),
        json!({"v": 1_700_000_000}),
        json!({"v": true}),
        json!({"v": "2024-01-01"}),
    ]);
    assert_eq!(
        fields,
        [
            field("v", FieldType::Struct(vec![field("a", FieldType::Int)])),
            field("v_boolean", FieldType::Boolean),
            field("v_date", FieldType::Date),
            field("v_list", list(FieldType::Int)),
            field("v_timestamp", FieldType::Timestamp),
        ]
    );
    let fields = infer(&[json!({"v": false}), json!({"v": "x"})]);
    assert_eq!(
        fields,
        [
            field("v", FieldType::Boolean),
            field("v_string", FieldType::String)
        ]
    );
}

/// A merge key column keeps a scalar kind: one stray object must not make `id` a struct
/// column, which would leave every scalar key in a sibling and every record refused.
#[test]
fn a_merge_key_column_prefers_a_scalar_kind_to_struct_and_list() {
    let records = [
        json!({"id": 1, "v": {"a": 1}}),
        json!({"id": "abc", "v": 2}),
        json!({"id": {"o": 1}}),
        json!({"id": [1]}),
        json!({"id": null}),
    ];
    let unkeyed = infer(&records);
    assert_eq!(
        unkeyed[0],
        field("id", FieldType::Struct(vec![field("o", FieldType::Int)]))
    );
    let merge_keys = crate::schema::MergeKeys {
        columns: vec!["id".into(), "v".into()],
        default: true,
        namespaces: BTreeMap::new(),
    };
    let keyed = infer_with(
        TransformOptions {
            merge_keys: merge_keys.clone(),
            ..TransformOptions::default()
        },
        &records,
    );
    assert_eq!(
        keyed,
        [
            field("id", FieldType::Int),
            field("id_list", list(FieldType::Int)),
            field("id_string", FieldType::String),
            field(
                "id_struct",
                FieldType::Struct(vec![field("o", FieldType::Int)])
            ),
            field("v", FieldType::Int),
            field(
                "v_struct",
                FieldType::Struct(vec![field("a", FieldType::Int)])
            ),
        ]
    );
    // Only at the top level of a merged namespace.
    let other = infer_with(
        TransformOptions {
            merge_keys: crate::schema::MergeKeys {
                namespaces: BTreeMap::from([("default".to_owned(), false)]),
                ..merge_keys
            },
            ..TransformOptions::default()
        },
        &records,
    );
    assert_eq!(other, unkeyed);
}

#[test]
fn a_sibling_that_collides_with_a_real_field_is_merged_into_it() {
    let fields = infer(&[
        json!({"price": 1, "price_string": "kept"}),
        json!({"price": "cheap"}),
    ]);
    assert_eq!(
        fields,
        [
            field("price", FieldType::Int),
            field("price_string", FieldType::String)
        ]
    );
    // When the merged values conflict again, the merged field gets siblings of its own.
    let fields = infer(&[
        json!({"price": 1, "price_string": 7}),
        json!({"price": "cheap"}),
    ]);
    assert_eq!(
        fields,
        [
            field("price", FieldType::Int),
            field("price_string", FieldType::Int),
            field("price_string_string", FieldType::String),
        ]
    );
}

#[test]
fn nested_objects_become_structs_to_full_depth_with_sorted_fields() {
    let fields = infer(&[json!({
        "z": 1,
        "a": {"y": {"x": {"w": {"deepest": "2020-01-01", "b": true}}, "c": 1.5}}
    })]);
    let level4 = FieldType::Struct(vec![
        field("b", FieldType::Boolean),
        field("deepest", FieldType::Date),
    ]);
    let level3 = FieldType::Struct(vec![field("w", level4)]);
    let level2 = FieldType::Struct(vec![field("c", FieldType::Double), field("x", level3)]);
    let level1 = FieldType::Struct(vec![field("y", level2)]);
    assert_eq!(fields, [field("a", level1), field("z", FieldType::Int)]);
}

#[test]
fn structs_merge_keys_seen_in_different_records() {
    let fields = infer(&[
        json!({"s": {"a": 1}}),
        json!({"s": {"b": "x"}}),
        json!({"s": null}),
    ]);
    assert_eq!(
        fields,
        [field(
            "s",
            FieldType::Struct(vec![
                field("a", FieldType::Int),
                field("b", FieldType::String)
            ])
        )]
    );
}

#[test]
fn arrays_of_objects_become_lists_of_structs_merged_over_all_elements() {
    let fields = infer(&[
        json!({"items": [{"sku": "a", "qty": 1}, {"sku": "b", "price": 2.5}]}),
        json!({"items": []}),
        json!({"items": [{"qty": 5_000_000_000_i64, "tags": ["x"]}]}),
    ]);
    let item = FieldType::Struct(vec![
        field("price", FieldType::Double),
        field("qty", FieldType::Long),
        field("sku", FieldType::String),
        field("tags", list(FieldType::String)),
    ]);
    assert_eq!(fields, [field("items", list(item))]);
}

#[test]
fn list_elements_that_conflict_make_the_element_type_string() {
    assert_eq!(
        type_of_x(&[json!([1, "a"]), json!([true])]),
        list(FieldType::String)
    );
    assert_eq!(type_of_x(&[json!([{"a": 1}, 2])]), list(FieldType::String));
}

#[test]
fn list_elements_follow_the_scalar_rules_and_empty_lists_are_lists_of_string() {
    assert_eq!(type_of_x(&[json!([1, 2.5, "3"])]), list(FieldType::Double));
    assert_eq!(
        type_of_x(&[json!(["2020-01-01", null])]),
        list(FieldType::Date)
    );
    assert_eq!(
        type_of_x(&[json!([]), json!([null])]),
        list(FieldType::String)
    );
    assert_eq!(
        type_of_x(&[json!([[1], [2, 3]])]),
        list(list(FieldType::Int))
    );
}

#[test]
fn records_are_routed_to_namespaces_and_counted() {
    let options = TransformOptions {
        namespace_fields: vec!["type".into()],
        ..TransformOptions::default()
    };
    let mut inferrer = SchemaInferrer::new(options);
    for record in [
        json!({"type": "Order", "id": 1}),
        json!({"type": "order", "total": 2.5}),
        json!({"type": "Click Event", "x": 1}),
        json!({"id": 9}),
    ] {
        inferrer.add(&object(record)).unwrap();
    }
    let seen: Vec<(&str, u64)> = inferrer.namespaces().collect();
    assert_eq!(seen, [("click_event", 1), ("default", 1), ("order", 2)]);
    let schema = inferrer.finish("p", "w");
    assert_eq!(
        schema.namespaces["order"].fields,
        [
            field("id", FieldType::Int),
            field("total", FieldType::Double),
            field("type", FieldType::String)
        ]
    );
}

#[test]
fn add_returns_the_namespace_the_record_went_to() {
    let options = TransformOptions {
        namespace_fields: vec!["meta.kind".into(), "v".into()],
        ..TransformOptions::default()
    };
    let mut inferrer = SchemaInferrer::new(options);
    let name = inferrer
        .add(&object(json!({"meta": {"kind": "Page View"}, "v": 2})))
        .unwrap();
    assert_eq!(name, "page_view_2");
}

#[test]
fn going_over_max_namespaces_is_an_error_naming_the_fields_and_the_limit() {
    let options = TransformOptions {
        namespace_fields: vec!["type".into(), "source".into()],
        max_namespaces: 2,
        ..TransformOptions::default()
    };
    let mut inferrer = SchemaInferrer::new(options);
    inferrer
        .add(&object(json!({"type": "a", "source": "s"})))
        .unwrap();
    inferrer
        .add(&object(json!({"type": "b", "source": "s"})))
        .unwrap();
    inferrer
        .add(&object(json!({"type": "a", "source": "s"})))
        .unwrap();
    let error = inferrer
        .add(&object(json!({"type": "c", "source": "s"})))
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("`type`, `source`"), "{message}");
    assert!(message.contains("more than 2"), "{message}");
    assert!(message.contains("c_s"), "{message}");
    // The rejected record was not accumulated.
    assert_eq!(inferrer.namespaces().count(), 2);
}

#[test]
fn flatten_events_turns_nested_objects_into_dotted_columns_but_keeps_lists() {
    let options = TransformOptions {
        flatten_events: true,
        ..TransformOptions::default()
    };
    let fields = infer_with(
        options,
        &[
            json!({"a": {"b": {"c": 1}}, "tags": [{"k": {"v": 1}}]}),
            json!({"a": {"d": "x"}}),
        ],
    );
    let tag = FieldType::Struct(vec![field(
        "k",
        FieldType::Struct(vec![field("v", FieldType::Int)]),
    )]);
    assert_eq!(
        fields,
        [
            field("a.b.c", FieldType::Int),
            field("a.d", FieldType::String),
            field("tags", list(tag)),
        ]
    );
}

/// Records whose object under `key` has one distinct key each: `{key: {"u0": 1}}`, ...
fn map_records(key: &str, keys: std::ops::Range<usize>) -> Vec<Value> {
    keys.map(|i| json!({ key: { format!("u{i}"): 1 } }))
        .collect()
}

fn with_max_fields(max_fields: usize) -> TransformOptions {
    TransformOptions {
        max_fields_per_struct: max_fields,
        ..TransformOptions::default()
    }
}

#[test]
fn a_nested_object_with_more_distinct_keys_than_the_limit_is_kept_as_json_text() {
    // Default limit: 1000 distinct keys are a struct, 1001 a map kept as text.
    let at_limit = infer(&map_records("m", 0..1000));
    assert!(matches!(&at_limit[0].field_type, FieldType::Struct(fields) if fields.len() == 1000));
    assert_eq!(
        infer(&map_records("m", 0..1001)),
        [field("m", FieldType::String)]
    );
    // The same with a small limit, and strings next to the objects share the column.
    let mut records = map_records("m", 0..4);
    records.push(json!({"m": "text", "n": 1}));
    assert_eq!(
        infer_with(with_max_fields(3), &records),
        [field("m", FieldType::String), field("n", FieldType::Int)]
    );
    // Objects next to numbers go to the `_string` sibling, like any other text.
    records.push(json!({"m": 5}));
    assert_eq!(
        infer_with(with_max_fields(3), &records),
        [
            field("m", FieldType::Int),
            field("m_string", FieldType::String),
            field("n", FieldType::Int)
        ]
    );
}

#[test]
fn a_collapsed_object_drops_its_children_so_memory_stays_bounded() {
    let mut inferrer = SchemaInferrer::new(with_max_fields(10));
    for record in map_records("m", 0..10_000) {
        inferrer.add(&object(record)).unwrap();
    }
    let acc = &inferrer.namespaces["default"].fields["m"];
    assert!(acc.collapsed);
    assert!(acc.children.is_empty());
    assert_eq!((acc.objects, acc.strings), (0, 10_000));
    // A single object with many keys collapses part-way, without storing all of them.
    let mut wide = Map::new();
    for i in 0..10_000 {
        wide.insert(format!("k{i}"), json!({"deep": i}));
    }
    let mut inferrer = SchemaInferrer::new(with_max_fields(10));
    inferrer
        .add(&object(json!({"w": Value::Object(wide)})))
        .unwrap();
    let acc = &inferrer.namespaces["default"].fields["w"];
    assert!(acc.collapsed && acc.children.is_empty());
}

#[test]
fn the_field_limit_applies_to_every_nested_struct_including_list_elements() {
    let records: Vec<Value> = (0..5)
            .map(|i| json!({"s": {"inner": {format!("k{i}"): true}, "id": i}, "items": [{format!("k{i}"): 1}]}))
            .collect();
    assert_eq!(
        infer_with(with_max_fields(4), &records),
        [
            field("items", list(FieldType::String)),
            field(
                "s",
                FieldType::Struct(vec![
                    field("id", FieldType::Int),
                    field("inner", FieldType::String)
                ])
            ),
        ]
    );
}

#[test]
fn a_collapsed_object_is_collapsed_whichever_partial_inference_saw_which_keys() {
    // Neither half goes over the limit of 3; together they do.
    let mut left = SchemaInferrer::new(with_max_fields(3));
    let mut right = SchemaInferrer::new(with_max_fields(3));
    for record in map_records("m", 0..3) {
        left.add(&object(record)).unwrap();
    }
    for record in map_records("m", 2..5) {
        right.add(&object(record)).unwrap();
    }
    let (mut left_first, right_first) = (left.clone(), right.clone());
    left_first.merge(right).unwrap();
    let mut right_first = right_first;
    right_first.merge(left).unwrap();
    let expected = [field("m", FieldType::String)];
    for merged in [left_first, right_first] {
        let mut schema = merged.finish("p", "w");
        assert_eq!(
            schema.namespaces.remove("default").unwrap().fields,
            expected
        );
    }
    // A collapsed side wins over one that is not.
    let mut small = SchemaInferrer::new(with_max_fields(3));
    small.add(&object(json!({"m": {"u0": 1}}))).unwrap();
    let mut big = SchemaInferrer::new(with_max_fields(3));
    for record in map_records("m", 0..4) {
        big.add(&object(record)).unwrap();
    }
    small.merge(big).unwrap();
    assert_eq!(
        small.finish("p", "w").namespaces["default"].fields,
        expected
    );
}

#[test]
fn more_distinct_top_level_fields_than_the_limit_is_an_error_naming_the_namespace_limit_and_keys() {
    let mut inferrer = SchemaInferrer::new(TransformOptions::default());
    for i in 0..1000 {
        inferrer
            .add(&object(json!({ format!("u{i}"): 1 })))
            .unwrap();
    }
    let error = inferrer
        .add(&object(json!({"u1000": 1, "u1": 2})))
        .unwrap_err();
    assert!(matches!(error, SchemaError::TooManyFields { .. }));
    let message = error.to_string();
    assert!(
            message.starts_with(
                "namespace `default` has more than 1000 distinct top-level fields (for example `u0`, `u1`, `u10`): its records look like a map"
            ),
            "{message}"
        );
    assert!(!message.contains("flatten_events"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    // The rejected record was not accumulated; known keys are still fine.
    assert_eq!(
        inferrer.namespaces().collect::<Vec<_>>(),
        [("default", 1000)]
    );
    assert!(!inferrer.namespaces["default"].fields.contains_key("u1000"));
    inferrer.add(&object(json!({"u5": 1}))).unwrap();

    // One record alone can be too wide, and with flattening the hint says so.
    let options = TransformOptions {
        flatten_events: true,
        ..with_max_fields(2)
    };
    let mut inferrer = SchemaInferrer::new(options);
    let error = inferrer
        .add(&object(json!({"m": {"x": 1, "y": 2, "z": 3}})))
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("(for example `m.x`, `m.y`, `m.z`)"),
        "{message}"
    );
    assert!(
        message.contains("`transform.flatten_events` is on"),
        "{message}"
    );
    assert_eq!(inferrer.namespaces().count(), 0);
}

#[test]
fn merging_partial_inferences_whose_top_level_fields_together_exceed_the_limit_fails_unchanged() {
    let mut left = SchemaInferrer::new(with_max_fields(3));
    let mut right = SchemaInferrer::new(with_max_fields(3));
    left.add(&object(json!({"a": 1, "b": 1}))).unwrap();
    right.add(&object(json!({"b": 1, "c": 1}))).unwrap();
    let mut ok = left.clone();
    ok.merge(right).unwrap();
    let mut other = SchemaInferrer::new(with_max_fields(3));
    other.add(&object(json!({"d": 1}))).unwrap();
    let before = ok.finish("p", "w");
    let error = ok.merge(other).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("more than 3 distinct top-level fields (for example `a`, `b`, `c`)"),
        "{error}"
    );
    assert_eq!(ok.finish("p", "w"), before);
}

/// A subscriber that keeps the `field` of every warning.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct FieldOf(Option<String>);
        impl tracing::field::Visit for FieldOf {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "field" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut visitor = FieldOf(None);
            event.record(&mut visitor);
            self.0.lock().unwrap().push(visitor.0.unwrap_or_default());
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn each_collapsed_path_is_logged_once_as_a_warning() {
    let warnings = Warnings::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        let mut left = SchemaInferrer::new(with_max_fields(3));
        for i in 0..10 {
            left.add(&object(json!({
                "m": {format!("u{i}"): 1},
                "items": [{"tags": {format!("t{i}"): 1}}],
            })))
            .unwrap();
        }
        assert_eq!(warnings.taken(), ["m", "items[].tags"]);
        // Merging with a side that collapsed the same path logs nothing new; a path
        // that collapses only because of the merge is logged then.
        let mut right = SchemaInferrer::new(with_max_fields(3));
        right
            .add(&object(json!({"m": {"a": 1, "b": 1, "c": 1, "d": 1}})))
            .unwrap();
        assert_eq!(warnings.taken(), ["m"]);
        right.add(&object(json!({"s": {"w": 1, "x": 1}}))).unwrap();
        left.add(&object(json!({"s": {"y": 1, "z": 1}}))).unwrap();
        assert!(warnings.taken().is_empty());
        left.merge(right).unwrap();
        assert_eq!(warnings.taken(), ["s"]);
    });
}

/// `{"l1": {"l2": ... {"l<levels>": 1}}}`
fn nested_objects(levels: usize) -> Value {
    (1..=levels).rev().fold(
        json!(1),
        |inner, level| json!({ format!("l{level}"): inner }),
    )
}

#[test]
fn objects_and_arrays_nested_deeper_than_max_depth_are_kept_as_json_text() {
    let fields = infer(&[nested_objects(40)]);
    let mut expected = FieldType::String;
    for level in (1..=MAX_DEPTH).rev() {
        expected = FieldType::Struct(vec![field(&format!("l{}", level + 1), expected)]);
    }
    assert_eq!(fields, [field("l1", expected)]);

    let arrays = (0..40).fold(json!(1), |inner, _| json!([inner]));
    let mut expected = FieldType::String;
    for _ in 0..MAX_DEPTH {
        expected = list(expected);
    }
    assert_eq!(type_of_x(&[arrays]), expected);

    // With flattening, nested objects are top-level columns and do not add depth.
    let flattened = TransformOptions {
        flatten_events: true,
        ..TransformOptions::default()
    };
    let fields = infer_with(flattened, &[nested_objects(40)]);
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].field_type, FieldType::Int);
}

#[test]
fn a_schema_discovered_from_deeply_nested_records_saves_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    for levels in [MAX_DEPTH, 40, 100] {
        let arrays = (0..levels).fold(json!({"end": true}), |inner, _| json!([inner]));
        let mut inferrer = SchemaInferrer::new(TransformOptions::default());
        inferrer
            .add(&object(json!({"o": nested_objects(levels), "a": arrays})))
            .unwrap();
        let schema = inferrer.finish("p", "w");
        let path = dir.path().join(format!("{levels}.json"));
        schema.save(&path).unwrap();
        let loaded =
            PipelineSchema::load(&path).unwrap_or_else(|error| panic!("{levels} levels: {error}"));
        assert_eq!(loaded, schema, "{levels} levels");
    }
}

#[test]
fn merging_partial_inferences_equals_inferring_everything_at_once() {
    let records = [
        json!({"a": 1, "b": {"c": "2020-01-01"}}),
        json!({"a": "x", "b": {"c": 3}}),
        json!({"a": 2.5, "l": [1, "y"]}),
    ];
    let mut whole = SchemaInferrer::new(TransformOptions::default());
    let mut left = SchemaInferrer::new(TransformOptions::default());
    let mut right = SchemaInferrer::new(TransformOptions::default());
    for (index, record) in records.iter().enumerate() {
        whole.add(&object(record.clone())).unwrap();
        let part = if index == 1 { &mut left } else { &mut right };
        part.add(&object(record.clone())).unwrap();
    }
    right.merge(left).unwrap();
    assert_eq!(
        right.finish("p", "w").to_json_pretty(),
        whole.finish("p", "w").to_json_pretty()
    );
}

/// Field names and values chosen to collide often and to hit every rule.
fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            -5i64..5,
            Just(i64::from(i32::MAX)),
            Just(i64::from(i32::MAX) + 1),
            1_262_304_000i64..1_262_304_010,
            1_262_304_000_000i64..1_262_304_000_010,
        ]
        .prop_map(Value::from),
        (-10.0f64..10.0).prop_map(Value::from),
        prop_oneof![
            Just("2024-01-31"),
            Just("2023-02-30"),
            Just("12.5"),
            Just("text"),
            Just("")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn arb_key() -> impl Strategy<Value = String> {
    // `a_string` and `a_int` collide with siblings of `a`, exercising the merge rule.
    prop_oneof![
        Just("a"),
        Just("b"),
        Just("B"),
        Just("c.d"),
        Just("a_string"),
        Just("a_int")
    ]
    .prop_map(str::to_owned)
}

fn arb_record() -> impl Strategy<Value = Map<String, Value>> {
    let flat = prop::collection::vec((arb_key(), arb_value()), 0..4)
        .prop_map(|pairs| pairs.into_iter().collect::<Map<String, Value>>());
    // Some records nest everything under `a` (keeping the namespace field `b`), so that
    // small field limits collapse nested objects without hitting the top-level limit.
    (flat, any::<bool>()).prop_map(|(record, wrap)| {
        if !wrap {
            return record;
        }
        let mut outer = Map::new();
        if let Some(b) = record.get("b") {
            outer.insert("b".into(), b.clone());
        }
        outer.insert("a".into(), Value::Object(record));
        outer
    })
}

fn options_for(flatten: bool, max_fields: usize) -> TransformOptions {
    TransformOptions {
        namespace_fields: vec!["b".into()],
        flatten_events: flatten,
        max_fields_per_struct: max_fields,
        ..TransformOptions::default()
    }
}

/// The schema text, or `None` when a namespace has too many top-level fields.
fn schema_text(
    records: &[&Map<String, Value>],
    flatten: bool,
    max_fields: usize,
) -> Option<String> {
    let mut inferrer = SchemaInferrer::new(options_for(flatten, max_fields));
    for record in records {
        match inferrer.add(record) {
            Ok(_) => {}
            Err(SchemaError::TooManyFields { .. }) => return None,
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    Some(inferrer.finish("p", "w").to_json_pretty())
}

proptest! {
    /// Also with small field limits, so that nested objects collapse to JSON text and
    /// some namespaces go over the limit: the outcome must not depend on order or split.
    #[test]
    fn the_schema_json_is_identical_whatever_the_order_or_split_of_records(
        (records, order, parts, merge_order, flatten, max_fields) in prop::collection::vec(arb_record(), 0..24)
            .prop_flat_map(|records| {
                let len = records.len();
                (
                    Just(records),
                    Just((0..len).collect::<Vec<usize>>()).prop_shuffle(),
                    prop::collection::vec(0..4usize, len),
                    Just(vec![0usize, 1, 2, 3]).prop_shuffle(),
                    any::<bool>(),
                    prop_oneof![Just(TransformOptions::DEFAULT_MAX_FIELDS_PER_STRUCT), 1..6usize],
                )
            })
    ) {
        let in_order: Vec<&Map<String, Value>> = records.iter().collect();
        let expected = schema_text(&in_order, flatten, max_fields);

        let shuffled: Vec<&Map<String, Value>> = order.iter().map(|&i| &records[i]).collect();
        prop_assert_eq!(&schema_text(&shuffled, flatten, max_fields), &expected);

        let merged = (|| {
            let mut partials: Vec<SchemaInferrer> = (0..4)
                .map(|_| SchemaInferrer::new(options_for(flatten, max_fields)))
                .collect();
            for (&index, part) in order.iter().zip(&parts) {
                partials[*part].add(&records[index]).ok()?;
            }
            let mut slots: Vec<Option<SchemaInferrer>> =
                partials.into_iter().map(Some).collect();
            let mut merged = slots[merge_order[0]].take()?;
            for &next in &merge_order[1..] {
                // Alternate which side absorbs the other.
                let mut other = slots[next].take()?;
                if next % 2 == 0 {
                    merged.merge(other).ok()?;
                } else {
                    other.merge(merged).ok()?;
                    merged = other;
                }
            }
            Some(merged.finish("p", "w").to_json_pretty())
        })();
        prop_assert_eq!(merged, expected);
    }
}
