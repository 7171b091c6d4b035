use super::*;
use crate::schema::{SchemaInferrer, TransformOptions};
use ::arrow::array::{Array, AsArray};
use ::arrow::datatypes::{Date32Type, Float64Type, Int32Type, Int64Type};
use proptest::prelude::*;
use serde_json::json;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn schema_of(fields: Vec<Field>) -> NamespaceSchema {
    NamespaceSchema { fields, records: 0 }
}

fn here() -> (String, u64, u64) {
    ("file:///data.jsonl".to_owned(), 7, 120)
}

fn build(ns: &NamespaceSchema, records: &[Value]) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(ns);
    for record in records {
        builder.append(&object(record.clone()), here).unwrap();
    }
    builder.finish().unwrap()
}

fn list(element: FieldType) -> FieldType {
    FieldType::List(Box::new(element))
}

#[test]
fn arrow_schema_maps_every_type_with_nullable_fields() {
    let fields = vec![
        Field::new("b", FieldType::Boolean),
        Field::new("i", FieldType::Int),
        Field::new("l", FieldType::Long),
        Field::new("d", FieldType::Double),
        Field::new("dt", FieldType::Date),
        Field::new("ts", FieldType::Timestamp),
        Field::new("tms", FieldType::TimestampMs),
        Field::new("s", FieldType::String),
        Field::new(
            "st",
            FieldType::Struct(vec![Field::new("x", FieldType::Int)]),
        ),
        Field::new("li", list(FieldType::String)),
    ];
    let schema = to_arrow_schema(&fields);
    let types: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|field| field.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Boolean,
            DataType::Int32,
            DataType::Int64,
            DataType::Float64,
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            DataType::Utf8,
            DataType::Struct(Fields::from(vec![ArrowField::new(
                "x",
                DataType::Int32,
                true
            )])),
            DataType::List(Arc::new(ArrowField::new("element", DataType::Utf8, true))),
        ]
    );
    assert!(schema.fields().iter().all(|field| field.is_nullable()));
}

#[test]
fn scalars_land_in_their_columns_and_missing_or_null_values_are_nulls() {
    let ns = schema_of(vec![
        Field::new("b", FieldType::Boolean),
        Field::new("d", FieldType::Double),
        Field::new("dt", FieldType::Date),
        Field::new("i", FieldType::Int),
        Field::new("l", FieldType::Long),
        Field::new("s", FieldType::String),
        Field::new("tms", FieldType::TimestampMs),
        Field::new("ts", FieldType::Timestamp),
    ]);
    let batch = build(
        &ns,
        &[
            json!({"b": true, "d": 1.5, "dt": "1970-01-02", "i": -3, "l": 5_000_000_000_i64,
                       "s": "hi", "tms": 1_700_000_000_123_i64, "ts": 1_700_000_000}),
            json!({"b": null, "d": 2, "dt": "2024-02-29", "s": 42, "extra": "ignored"}),
            json!({"d": "3.25", "s": {"k": [1, true]}}),
        ],
    );
    assert_eq!(batch.num_rows(), 3);
    let b = batch.column(0).as_boolean();
    assert!(b.value(0));
    assert!(b.is_null(1) && b.is_null(2));
    let d = batch.column(1).as_primitive::<Float64Type>();
    assert_eq!(d.values().to_vec(), [1.5, 2.0, 3.25]);
    let dt = batch.column(2).as_primitive::<Date32Type>();
    assert_eq!(dt.value(0), 1);
    assert_eq!(dt.value(1), 19_782);
    assert!(dt.is_null(2));
    let i = batch.column(3).as_primitive::<Int32Type>();
    assert_eq!(i.value(0), -3);
    assert_eq!(i.null_count(), 2);
    assert_eq!(
        batch.column(4).as_primitive::<Int64Type>().value(0),
        5_000_000_000
    );
    let s = batch.column(5).as_string::<i32>();
    assert_eq!(
        [s.value(0), s.value(1), s.value(2)],
        ["hi", "42", r#"{"k":[1,true]}"#]
    );
    let tms = batch
        .column(6)
        .as_primitive::<::arrow::datatypes::TimestampMillisecondType>();
    assert_eq!(tms.value(0), 1_700_000_000_123);
    let ts = batch
        .column(7)
        .as_primitive::<::arrow::datatypes::TimestampMicrosecondType>();
    assert_eq!(ts.value(0), 1_700_000_000_000_000);
    assert_eq!(batch.schema(), Arc::new(to_arrow_schema(&ns.fields)));
}

#[test]
fn values_that_do_not_fit_go_to_their_sibling_column_and_numeric_strings_stay_in_double() {
    let ns = schema_of(vec![
        Field::new("price", FieldType::Double),
        Field::new("price_string", FieldType::String),
    ]);
    let batch = build(
        &ns,
        &[
            json!({"price": 1}),
            json!({"price": "7.5"}),
            json!({"price": "n/a"}),
            json!({}),
        ],
    );
    let price = batch.column(0).as_primitive::<Float64Type>();
    assert_eq!((price.value(0), price.value(1)), (1.0, 7.5));
    assert!(price.is_null(2) && price.is_null(3));
    let text = batch.column(1).as_string::<i32>();
    assert_eq!(text.null_count(), 3);
    assert_eq!(text.value(2), "n/a");
}

/// Regression (found by an outside-in probe): 18446744073709551615 landed in a double column
/// as 1.8446744073709552e19. An integer past `i64` that a double would round goes to the
/// string sibling as its exact digits, by the `serde_json` path and the tape path alike.
#[test]
fn an_integer_past_i64_goes_to_the_string_sibling_not_into_a_double() {
    let ns = schema_of(vec![
        Field::new("x", FieldType::Double),
        Field::new("x_string", FieldType::String),
    ]);
    let lines = [
        r#"{"x":18446744073709551615}"#,
        r#"{"x":9223372036854775808}"#,
        r#"{"x":9223372036854775807}"#,
        r#"{"x":-0}"#,
        r#"{"x":2.5}"#,
    ];
    let slow = build(
        &ns,
        &lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect::<Vec<Value>>(),
    );
    let mut builder = RecordBatchBuilder::new(&ns);
    let (mut tape, mut scratch) = (crate::schema::json_tape::Tape::default(), Vec::new());
    for line in lines {
        assert!(tape.parse(line.as_bytes()));
        if !builder.append_tape(&tape, line.as_bytes(), &mut scratch) {
            let value: Value = serde_json::from_str(line).unwrap();
            builder.append(&object(value), here).unwrap();
        }
    }
    let fast = builder.finish().unwrap();
    assert_eq!(slow, fast);
    let x = slow.column(0).as_primitive::<Float64Type>();
    let text = slow.column(1).as_string::<i32>();
    assert!(x.is_null(0) && x.is_null(1));
    assert_eq!(text.value(0), "18446744073709551615");
    assert_eq!(text.value(1), "9223372036854775808");
    assert_eq!(x.value(2), 9_223_372_036_854_775_807_f64);
    assert_eq!((x.value(3), x.value(4)), (-0.0, 2.5));
    assert_eq!(text.null_count(), 3);
}

#[test]
fn siblings_are_tried_in_type_order_and_through_merged_siblings() {
    // `a_string` is a real int field that also took strings from `a` at discovery,
    // so it has its own sibling `a_string_string`.
    let ns = schema_of(vec![
        Field::new("a", FieldType::Int),
        Field::new("a_long", FieldType::Long),
        Field::new("a_string", FieldType::Int),
        Field::new("a_string_string", FieldType::String),
    ]);
    let batch = build(&ns, &[json!({"a": 9_000_000_000_i64}), json!({"a": "x"})]);
    assert_eq!(
        batch.column(1).as_primitive::<Int64Type>().value(0),
        9_000_000_000
    );
    assert!(batch.column(2).is_null(1));
    assert_eq!(batch.column(3).as_string::<i32>().value(1), "x");
}

#[test]
fn a_sibling_column_is_not_used_when_the_record_has_its_own_value_for_it() {
    let ns = schema_of(vec![
        Field::new("price", FieldType::Double),
        Field::new("price_string", FieldType::String),
    ]);
    let mut builder = RecordBatchBuilder::new(&ns);
    let record = object(json!({"price": "n/a", "price_string": "own"}));
    let rejected = builder.append(&record, here).unwrap_err();
    assert!(rejected.error.contains("`price`"), "{}", rejected.error);
    assert_eq!(builder.len(), 0);
}

#[test]
fn nested_structs_and_lists_are_built_recursively() {
    let item = FieldType::Struct(vec![
        Field::new("qty", FieldType::Int),
        Field::new("sku", FieldType::String),
    ]);
    let ns = schema_of(vec![
        Field::new("items", list(item)),
        Field::new("matrix", list(list(FieldType::Int))),
        Field::new(
            "meta",
            FieldType::Struct(vec![Field::new(
                "inner",
                FieldType::Struct(vec![Field::new("flag", FieldType::Boolean)]),
            )]),
        ),
    ]);
    let batch = build(
        &ns,
        &[
            json!({"items": [{"qty": 1, "sku": "a"}, {"sku": "b"}, null],
                       "matrix": [[1, 2], [], null], "meta": {"inner": {"flag": true}}}),
            json!({"items": null, "meta": {}}),
            json!({"items": [], "matrix": [[3]]}),
        ],
    );
    let items = batch.column(0).as_list::<i32>();
    assert_eq!(items.value_offsets(), [0, 3, 3, 3]);
    assert!(items.is_null(1) && items.is_valid(2));
    let elements = items.values().as_struct();
    assert_eq!(elements.len(), 3);
    assert!(elements.is_null(2));
    let qty = elements.column(0).as_primitive::<Int32Type>();
    assert_eq!(qty.value(0), 1);
    assert!(qty.is_null(1));
    assert_eq!(elements.column(1).as_string::<i32>().value(1), "b");

    let matrix = batch.column(1).as_list::<i32>();
    assert_eq!(matrix.value_offsets(), [0, 3, 3, 4]);
    let rows = matrix.values().as_list::<i32>();
    assert_eq!(rows.value_offsets(), [0, 2, 2, 2, 3]);
    assert!(rows.is_null(2));
    assert_eq!(
        rows.values().as_primitive::<Int32Type>().values().to_vec(),
        [1, 2, 3]
    );

    let meta = batch.column(2).as_struct();
    assert!(meta.is_valid(1) && meta.is_null(2));
    let inner = meta.column(0).as_struct();
    assert!(inner.is_valid(0) && inner.is_null(1));
    assert!(inner.column(0).as_boolean().value(0));
}

#[test]
fn an_untypeable_record_becomes_a_deadletter_and_leaves_the_batch_consistent() {
    let item = FieldType::Struct(vec![Field::new("qty", FieldType::Int)]);
    let ns = schema_of(vec![
        Field::new("a", FieldType::String),
        Field::new("items", list(item)),
        Field::new("z", FieldType::Long),
    ]);
    let mut builder = RecordBatchBuilder::new(&ns).with_namespace("orders");
    builder
        .append(
            &object(json!({"a": "first", "items": [{"qty": 1}], "z": 1})),
            here,
        )
        .unwrap();
    // Fails deep inside the second list element, after `a` and the first element were
    // already appended.
    let bad = object(json!({"a": "bad", "items": [{"qty": 2}, {"qty": "many"}], "z": 2}));
    let rejected = builder.append(&bad, here).unwrap_err();
    assert_eq!(rejected.code, FailureCode::Untypeable);
    assert_eq!(rejected.source_uri, "file:///data.jsonl");
    assert_eq!((rejected.line, rejected.offset), (7, 120));
    assert_eq!(rejected.namespace.as_deref(), Some("orders"));
    assert_eq!(
        rejected.error,
        "cannot type field `items[1].qty`: a JSON string fits neither its column (int) nor a sibling column"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&rejected.raw).unwrap(),
        Value::Object(bad)
    );
    // Also at the top level, after earlier columns were appended.
    let rejected = builder
        .append(&object(json!({"a": "x", "z": true})), here)
        .unwrap_err();
    assert_eq!(
        rejected.error,
        "cannot type field `z`: a JSON boolean fits neither its column (long) nor a sibling column"
    );
    builder
        .append(
            &object(json!({"a": "last", "items": [{"qty": 3}], "z": 3})),
            here,
        )
        .unwrap();
    assert_eq!(builder.len(), 2);

    let batch = builder.finish().unwrap();
    assert_eq!(batch.num_rows(), 2);
    assert!(batch.columns().iter().all(|column| column.len() == 2));
    let a = batch.column(0).as_string::<i32>();
    assert_eq!([a.value(0), a.value(1)], ["first", "last"]);
    let items = batch.column(1).as_list::<i32>();
    assert_eq!(items.value_offsets(), [0, 1, 2]);
    let qty = items
        .values()
        .as_struct()
        .column(0)
        .as_primitive::<Int32Type>();
    assert_eq!(qty.values().to_vec(), [1, 3]);
    assert_eq!(
        batch
            .column(2)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec(),
        [1, 3]
    );
}

#[test]
fn integers_too_big_for_their_column_are_untypeable_without_a_sibling() {
    let ns = schema_of(vec![Field::new("n", FieldType::Int)]);
    let mut builder = RecordBatchBuilder::new(&ns);
    let rejected = builder
        .append(&object(json!({"n": 3_000_000_000_i64})), here)
        .unwrap_err();
    assert!(
        rejected.error.contains("JSON integer"),
        "{}",
        rejected.error
    );
    assert!(builder.is_empty());
    assert_eq!(builder.finish().unwrap().num_rows(), 0);
}

#[test]
fn a_list_element_that_does_not_fit_names_its_index() {
    let ns = schema_of(vec![Field::new("tags", list(FieldType::Int))]);
    let mut builder = RecordBatchBuilder::new(&ns);
    let rejected = builder
        .append(&object(json!({"tags": [1, "x"]})), here)
        .unwrap_err();
    assert_eq!(
        rejected.error,
        "cannot type field `tags[1]`: a JSON string does not fit the column type int"
    );
    assert!(builder.is_empty());
}

#[test]
fn finish_starts_a_fresh_batch() {
    let ns = schema_of(vec![
        Field::new("s", FieldType::String),
        Field::new("n", FieldType::Int),
    ]);
    let mut builder = RecordBatchBuilder::new(&ns);
    builder
        .append(&object(json!({"s": "one", "n": 1})), here)
        .unwrap();
    assert_eq!(builder.finish().unwrap().num_rows(), 1);
    builder.append(&object(json!({"s": "two"})), here).unwrap();
    builder.append(&object(json!({"n": 3})), here).unwrap();
    let batch = builder.finish().unwrap();
    assert_eq!(batch.num_rows(), 2);
    let s = batch.column(0).as_string::<i32>();
    assert_eq!(s.value(0), "two");
    assert!(s.is_null(1));
}

#[test]
fn a_schema_without_fields_still_counts_rows() {
    let mut builder = RecordBatchBuilder::new(&NamespaceSchema::default());
    builder
        .append(&object(json!({"ignored": 1})), here)
        .unwrap();
    assert_eq!(builder.finish().unwrap().num_rows(), 1);
}

#[test]
fn with_flatten_events_the_builder_reads_dotted_columns() {
    let ns = schema_of(vec![
        Field::new("a.b", FieldType::Int),
        Field::new("a.c", FieldType::String),
        Field::new("list", list(FieldType::String)),
    ]);
    let mut builder = RecordBatchBuilder::new(&ns).with_flatten_events(true);
    builder
        .append(
            &object(json!({"a": {"b": 1, "c": "x"}, "list": [{"k": 1}]})),
            here,
        )
        .unwrap();
    let batch = builder.finish().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int32Type>().value(0), 1);
    assert_eq!(batch.column(1).as_string::<i32>().value(0), "x");
    let list = batch.column(2).as_list::<i32>();
    assert_eq!(list.values().as_string::<i32>().value(0), r#"{"k":1}"#);
}

#[test]
fn maps_over_the_field_limit_and_values_beyond_max_depth_are_typed_as_json_text() {
    let options = TransformOptions {
        max_fields_per_struct: 3,
        ..TransformOptions::default()
    };
    let deep = (0..40).fold(json!({"end": [1]}), |inner, _| json!({ "n": inner }));
    let records = [
        json!({"m": {"a": 1}, "items": [{"x": 1}], "deep": deep}),
        json!({"m": {"b": [true]}, "items": [{"y": 2}, {"z": 3}, {"w": 4}]}),
        json!({"m": {"c": null, "d": {"e": 1}}}),
        json!({"m": "plain text"}),
    ];
    let mut inferrer = SchemaInferrer::new(options);
    for record in &records {
        inferrer.add(&object(record.clone())).unwrap();
    }
    let schema = inferrer.finish("p", "w");
    let ns = &schema.namespaces["default"];
    let batch = build(ns, &records);
    let names: Vec<&str> = ns.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["deep", "items", "m"]);
    assert_eq!(ns.fields[1].field_type, list(FieldType::String));
    assert_eq!(ns.fields[2].field_type, FieldType::String);

    let m = batch.column(2).as_string::<i32>();
    assert_eq!(
        (0..4).map(|row| m.value(row)).collect::<Vec<_>>(),
        [
            r#"{"a":1}"#,
            r#"{"b":[true]}"#,
            r#"{"c":null,"d":{"e":1}}"#,
            "plain text"
        ]
    );
    let items = batch.column(1).as_list::<i32>();
    let elements = items.values().as_string::<i32>();
    assert_eq!(
        (0..4).map(|i| elements.value(i)).collect::<Vec<_>>(),
        [r#"{"x":1}"#, r#"{"y":2}"#, r#"{"z":3}"#, r#"{"w":4}"#]
    );
    // `deep` is a struct down to level 32; below that the object is JSON text.
    let mut column = Arc::clone(batch.column(0));
    for _ in 1..crate::schema::MAX_DEPTH {
        column = Arc::clone(column.as_struct().column(0));
    }
    let text = column.as_struct().column(0).as_string::<i32>();
    let expected = (0..40 - crate::schema::MAX_DEPTH)
        .fold(json!({"end": [1]}), |inner, _| json!({ "n": inner }));
    assert_eq!(text.value(0), expected.to_string());
    assert!(text.is_null(1));
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            any::<i64>(),
            -5i64..5,
            Just(i64::from(i32::MAX) + 1),
            1_262_304_000i64..1_262_304_010,
            1_262_304_000_000i64..1_262_304_000_010,
        ]
        .prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        prop_oneof![
            Just("2024-01-31"),
            Just("2023-02-30"),
            Just("-1.5e3"),
            Just("text")
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
    prop_oneof![Just("a"), Just("b"), Just("B"), Just("c.d")].prop_map(str::to_owned)
}

proptest! {
    #[test]
    fn every_record_used_for_discovery_types_into_the_discovered_schema(
        records in prop::collection::vec(
            prop::collection::vec((arb_key(), arb_value()), 0..4)
                .prop_map(|pairs| pairs.into_iter().collect::<Map<String, Value>>()),
            1..16,
        ),
        flatten in any::<bool>(),
        max_fields in prop_oneof![Just(TransformOptions::DEFAULT_MAX_FIELDS_PER_STRUCT), 1..4usize],
    ) {
        let options = TransformOptions {
            flatten_events: flatten,
            max_fields_per_struct: max_fields,
            ..TransformOptions::default()
        };
        let mut inferrer = SchemaInferrer::new(options);
        for record in &records {
            // Records too wide for a small limit have no schema to type into.
            if let Err(error) = inferrer.add(record) {
                prop_assert!(matches!(error, SchemaError::TooManyFields { .. }), "{}", error);
                return Ok(());
            }
        }
        let schema = inferrer.finish("p", "w");
        let ns = &schema.namespaces["default"];
        let mut builder = RecordBatchBuilder::new(ns).with_flatten_events(flatten);
        for record in &records {
            if let Err(rejected) = builder.append(record, here) {
                return Err(TestCaseError::fail(format!(
                    "{} for {}\nschema: {}",
                    rejected.error,
                    rejected.raw,
                    schema.to_json_pretty()
                )));
            }
        }
        let batch = builder.finish().unwrap();
        prop_assert_eq!(batch.num_rows(), records.len());
    }
}

#[test]
fn keys_the_schema_has_no_column_for_are_noticed_at_any_depth() {
    let ns = NamespaceSchema {
        fields: vec![
            Field::new("a", FieldType::Long),
            Field::new(
                "s",
                FieldType::Struct(vec![Field::new("x", FieldType::Long)]),
            ),
        ],
        records: 1,
    };
    let here = || (String::new(), 0, 0);
    let mut builder = RecordBatchBuilder::new(&ns);
    builder
        .append(
            &object(serde_json::json!({"a": 1, "s": {"x": 2}, "n": null})),
            here,
        )
        .unwrap();
    assert!(
        builder.saw_unknown_keys(),
        "a top-level key that is only null still counts"
    );
    let mut builder = RecordBatchBuilder::new(&ns);
    builder
        .append(&object(serde_json::json!({"a": 1, "s": {"x": 2}})), here)
        .unwrap();
    builder
        .append(&object(serde_json::json!({"a": null})), here)
        .unwrap();
    assert!(!builder.saw_unknown_keys());
    builder
        .append(&object(serde_json::json!({"s": {"x": 2, "y": 3}})), here)
        .unwrap();
    assert!(builder.saw_unknown_keys(), "a nested key counts too");
}

/// `merge_by_key`: a record whose key column would be NULL (its value null or missing, an
/// object, or a value that lands in a sibling column) is a `bad_key` deadletter naming the
/// column, from the record's parsed value and from its text alike; without a merge key the
/// same records are rows (and every one without a key would merge as the one NULL key).
#[test]
fn a_record_without_its_own_value_in_a_merge_key_column_is_a_bad_key_deadletter() {
    let ns = schema_of(vec![
        Field::new("_op", FieldType::String),
        Field::new("id", FieldType::Int),
        Field::new("id_string", FieldType::String),
        Field::new(
            "id_struct",
            FieldType::Struct(vec![Field::new("o", FieldType::Int)]),
        ),
        Field::new("v", FieldType::String),
    ]);
    let key = ["id".to_owned()];
    let cases: [(&str, Option<&str>); 9] = [
        (r#"{"id":1,"v":"a"}"#, None),
        (
            r#"{"id":null,"v":"n1"}"#,
            Some("cannot merge by key: the `primary_key` column `id` is null in this record"),
        ),
        (
            r#"{"v":"missing"}"#,
            Some("cannot merge by key: the `primary_key` column `id` is missing in this record"),
        ),
        (
            r#"{"id":"2","v":"strkey"}"#,
            Some(
                "cannot merge by key: the `primary_key` column `id` (int) cannot hold this record's value, a JSON string (it would land in a sibling column and leave the key NULL)",
            ),
        ),
        (
            r#"{"id":{"o":1},"v":"obj"}"#,
            Some(
                "cannot merge by key: the `primary_key` column `id` holds a JSON object in this record, not a single value",
            ),
        ),
        (
            r#"{"id":2147483648,"v":"too big for int: its text goes to id_string"}"#,
            Some(
                "cannot merge by key: the `primary_key` column `id` (int) cannot hold this record's value, a JSON integer (it would land in a sibling column and leave the key NULL)",
            ),
        ),
        // A delete names its key like any change.
        (
            r#"{"id":null,"_op":"d"}"#,
            Some("cannot merge by key: the `primary_key` column `id` is null in this record"),
        ),
        // A truncate names none: it empties the table.
        (r#"{"_op":"t"}"#, None),
        (r#"{"id":2,"v":"b","_op":"u"}"#, None),
    ];
    let mut slow = RecordBatchBuilder::new(&ns)
        .with_namespace("p")
        .with_merge_key(&key);
    let mut fast = RecordBatchBuilder::new(&ns)
        .with_namespace("p")
        .with_merge_key(&key);
    let mut unkeyed = RecordBatchBuilder::new(&ns);
    let (mut tape, mut scratch) = (crate::schema::json_tape::Tape::default(), Vec::new());
    for (line, refused) in cases {
        let record = object(serde_json::from_str(line).unwrap());
        let got = slow.append(&record, here);
        match refused {
            None => assert!(got.is_ok(), "{line}: {got:?}"),
            Some(error) => {
                let dl = got.unwrap_err();
                assert_eq!(dl.error, error, "{line}");
                assert_eq!(dl.code, FailureCode::BadKey, "{line}");
                assert_eq!(dl.namespace.as_deref(), Some("p"));
                assert_eq!(
                    serde_json::from_str::<Value>(&dl.raw).unwrap(),
                    json!(record)
                );
            }
        }
        // The tape takes what `append` takes, or refuses it for `append` to decide.
        assert!(tape.parse(line.as_bytes()));
        if !fast.append_tape(&tape, line.as_bytes(), &mut scratch) {
            assert_eq!(
                fast.append(&record, here).is_ok(),
                refused.is_none(),
                "{line}"
            );
        }
        // Without a key, each of them is a row.
        unkeyed.append(&record, here).unwrap();
    }
    assert_eq!(unkeyed.len(), 9);
    let batch = slow.finish().unwrap();
    assert_eq!(batch, fast.finish().unwrap());
    assert_eq!(batch.num_rows(), 3);
    let id = batch.column(1).as_primitive::<Int32Type>();
    assert_eq!(
        (0..3)
            .map(|i| id.is_valid(i).then(|| id.value(i)))
            .collect::<Vec<_>>(),
        [Some(1), None, Some(2)],
        "the truncate is the one row without a key"
    );
}

/// A composite key needs every column; a key column missing from the schema refuses every
/// record but a truncate; a key column of a struct type holds no key.
#[test]
fn every_merge_key_column_needs_a_single_value_of_its_own() {
    let ns = schema_of(vec![
        Field::new("k1", FieldType::Long),
        Field::new("k2", FieldType::String),
        Field::new(
            "s",
            FieldType::Struct(vec![Field::new("o", FieldType::Int)]),
        ),
    ]);
    let composite = ["k1".to_owned(), "k2".to_owned()];
    let mut builder = RecordBatchBuilder::new(&ns).with_merge_key(&composite);
    builder
        .append(&object(json!({"k1": 1, "k2": "x"})), here)
        .unwrap();
    // A string key column holds numbers as their text: a key like any other.
    builder
        .append(&object(json!({"k1": 1, "k2": 5})), here)
        .unwrap();
    let dl = builder.append(&object(json!({"k1": 1})), here).unwrap_err();
    assert_eq!(
        dl.error,
        "cannot merge by key: the `primary_key` column `k2` is missing in this record"
    );
    let dl = builder
        .append(&object(json!({"k1": 1, "k2": ["x"]})), here)
        .unwrap_err();
    assert_eq!(
        dl.error,
        "cannot merge by key: the `primary_key` column `k2` holds a JSON array in this record, not a single value"
    );
    assert_eq!(builder.len(), 2);

    let absent = ["nope".to_owned()];
    let mut builder = RecordBatchBuilder::new(&ns).with_merge_key(&absent);
    let dl = builder
        .append(&object(json!({"k1": 1, "nope": 1})), here)
        .unwrap_err();
    assert_eq!(
        dl.error,
        "cannot merge by key: the schema has no `primary_key` column `nope`"
    );
    assert_eq!(dl.code, FailureCode::BadKey);

    let structured = ["s".to_owned()];
    let mut builder = RecordBatchBuilder::new(&ns).with_merge_key(&structured);
    let line = r#"{"s":{"o":1}}"#;
    let (mut tape, mut scratch) = (crate::schema::json_tape::Tape::default(), Vec::new());
    assert!(tape.parse(line.as_bytes()));
    assert!(!builder.append_tape(&tape, line.as_bytes(), &mut scratch));
    assert_eq!(builder.len(), 0);
    let dl = builder
        .append(&object(serde_json::from_str(line).unwrap()), here)
        .unwrap_err();
    assert_eq!(
        dl.error,
        "cannot merge by key: the `primary_key` column `s` holds a JSON object in this record, not a single value"
    );
}

#[test]
fn decimal_text_is_read_exactly_or_not_at_all() {
    use super::parse_decimal;
    for (text, precision, scale, unscaled) in [
        ("0", 1, 0, Some(0)),
        ("-1234.500", 12, 3, Some(-1_234_500)),
        ("-1234.5", 12, 3, Some(-1_234_500)),
        ("007.10", 5, 2, Some(710)),
        ("0.001", 3, 3, Some(1)),
        ("123456789", 9, 0, Some(123_456_789)),
        ("1234567890", 9, 0, None),
        ("1.001", 5, 2, None),
        ("1.", 5, 2, None),
        (".5", 5, 2, None),
        ("+1", 5, 2, None),
        ("1e3", 5, 2, None),
        ("NaN", 5, 2, None),
        ("", 5, 2, None),
        ("-", 5, 2, None),
        ("12.3", 3, 2, None),
    ] {
        assert_eq!(
            parse_decimal(text, precision, scale),
            unscaled,
            "{text} ({precision},{scale})"
        );
    }
}

#[test]
fn a_decimal_column_takes_decimal_text_and_nothing_else() {
    let ns = NamespaceSchema {
        fields: vec![Field::new("price", FieldType::decimal(12, 3).unwrap())],
        records: 0,
    };
    let mut builder = RecordBatchBuilder::new(&ns);
    builder
        .append(json!({"price": "-1234.500"}).as_object().unwrap(), || {
            (String::new(), 0, 0)
        })
        .unwrap();
    builder
        .append(json!({"price": null}).as_object().unwrap(), || {
            (String::new(), 0, 0)
        })
        .unwrap();
    assert!(
        builder
            .append(json!({"price": 1.5}).as_object().unwrap(), || (
                String::new(),
                0,
                0
            ))
            .is_err()
    );
    let batch = builder.finish().unwrap();
    let prices = batch
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Decimal128Array>()
        .unwrap();
    assert_eq!(prices.precision(), 12);
    assert_eq!(prices.scale(), 3);
    assert_eq!(prices.value(0), -1_234_500);
    assert!(prices.is_null(1));
    assert_eq!(prices.len(), 2);
}
