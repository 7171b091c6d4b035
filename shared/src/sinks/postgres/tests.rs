#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

#[test]
fn widenings_are_made_and_conflicts_refused() {
    assert_eq!(fit("integer", "integer"), Fit::Takes);
    assert_eq!(fit("integer", "bigint"), Fit::Widen);
    assert_eq!(fit("bigint", "double precision"), Fit::Widen);
    assert_eq!(fit("integer", "double precision"), Fit::Widen);
    assert_eq!(fit("bigint", "integer"), Fit::Takes);
    assert_eq!(fit("text", "bigint"), Fit::Takes);
    assert_eq!(fit("text", "jsonb"), Fit::Conflict);
    assert_eq!(fit("jsonb", "text"), Fit::Conflict);
    assert_eq!(fit("double precision", "bigint"), Fit::Takes);
    assert_eq!(fit("bigint", "boolean"), Fit::Conflict);
    assert_eq!(fit("date", "timestamp with time zone"), Fit::Conflict);
}

#[test]
fn names_fit_postgres_and_keep_short_ones_exactly() {
    assert_eq!(PostgresSink::column_of("quo\"te ключ"), "quo\"te ключ");
    let long = "ü".repeat(40);
    let cut = PostgresSink::column_of(&long);
    assert!(cut.len() <= 63, "{cut}");
    assert_ne!(cut, PostgresSink::column_of(&"ü".repeat(41)));
    assert!(PostgresSink::table_of(&"x".repeat(200)).len() <= 63);
    assert_eq!(PostgresSink::table_of("shop.orders"), "shop_orders");
    assert_eq!(
        pg_type(&FieldType::List(Box::new(FieldType::Long))),
        "jsonb"
    );
}

#[test]
fn nested_columns_become_json_and_nulls_stay_null() {
    use crate::schema::Field;
    let fields = vec![
        Field::new("id", FieldType::Long),
        Field::new(
            "c",
            FieldType::Struct(vec![Field::new("n", FieldType::String)]),
        ),
    ];
    let arrow = Arc::new(crate::schema::to_arrow_schema(&fields));
    let json = arrow::json::ReaderBuilder::new(arrow)
        .build(std::io::Cursor::new(
            "{\"id\":1,\"c\":{\"n\":\"a\"}}\n{\"id\":2}\n",
        ))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let out = nested_json(&json, &fields).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[&1][0], serde_json::json!({"n": "a"}));
    assert!(out[&1][1].is_null());
    let values = column_values(json.column(1), Some(&out[&1]));
    assert!(matches!(values[1], Value::Null));
}
