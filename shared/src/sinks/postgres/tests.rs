#![allow(clippy::unwrap_used, reason = "tests")]

use super::values::numeric_binary;
use super::*;
use bytes::BytesMut;

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
    assert_eq!(fit("numeric(12,3)", "numeric(14,3)"), Fit::Widen);
    assert_eq!(fit("numeric(14,3)", "numeric(12,3)"), Fit::Takes);
    assert_eq!(fit("numeric(12,3)", "numeric(12,2)"), Fit::Conflict);
    assert_eq!(fit("text", "numeric(12,3)"), Fit::Takes);
}

/// Decimals go out as PostgreSQL's binary `numeric`, which the Postgres source's decoder
/// reads back as exactly the decimal they are: as text, and as a decimal cell whose text is
/// that text.
#[test]
fn decimals_are_sent_as_binary_numeric_that_reads_back_exactly() {
    use crate::sources::cells::decimal_text;
    use crate::sources::postgres::decode::{numeric, numeric_unscaled};
    let written = |unscaled: i128, scale: u8| {
        let mut out = BytesMut::new();
        numeric_binary(unscaled, scale, &mut out);
        let text = numeric(&out).unwrap();
        assert_eq!(
            numeric_unscaled(&out),
            Some((unscaled, scale)),
            "decimal cell of {text}"
        );
        assert_eq!(decimal_text(unscaled, scale), text);
        text
    };
    for (unscaled, scale, text) in [
        (0, 0, "0"),
        (0, 3, "0.000"),
        (-1_234_500, 3, "-1234.500"),
        (1, 3, "0.001"),
        (-5, 8, "-0.00000005"),
        (12_345_678, 0, "12345678"),
        (100_000_000, 2, "1000000.00"),
        (10_000, 0, "10000"),
        (
            99_999_999_999_999_999_999_999_999_999_999_999_999,
            38,
            "0.99999999999999999999999999999999999999",
        ),
        (
            -99_999_999_999_999_999_999_999_999_999_999_999_999,
            0,
            "-99999999999999999999999999999999999999",
        ),
    ] {
        assert_eq!(written(unscaled, scale), text, "{unscaled} scale {scale}");
    }
    // Many more, through the decoder and back.
    for (state, unscaled) in crate::schema::sample_decimals(0x2545_f491_4f6c_dd1d).take(20_000) {
        let scale = ((state >> 8) % 39) as u8;
        let text = written(unscaled, scale);
        assert_eq!(
            crate::schema::parse_decimal(&text, 38, scale),
            Some(unscaled),
            "{unscaled} scale {scale}: {text}"
        );
    }
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
