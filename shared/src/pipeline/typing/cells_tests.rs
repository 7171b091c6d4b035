//! Typing rows of cells (the Postgres source's) equals typing the JSON objects they stand
//! for: the same Arrow bytes when the schema holds them, and the same schema and Arrow bytes
//! out of inference when it does not, but where inference reads a cell by its column's type
//! on purpose: an integer cell is never a Unix time, an instant cell is a timestamp.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::tests::{infer_rejecting_nothing, ipc_bytes};
use super::*;
use crate::schema::SchemaInferrer;
use crate::sources::Position;
use crate::sources::cells::CellPage;

/// One cell value, as the JSON value it stands for (pushed with the page's typed pushes).
fn cell_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => (-5i64..5).prop_map(Value::from),
        1 => any::<i32>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (1_262_304_000i64..1_262_304_010).prop_map(Value::from),
        1 => (1_262_304_000_000i64..1_262_304_000_010).prop_map(Value::from),
        2 => (-1e6f64..1e6).prop_map(|f| json!(f)),
        1 => prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(3.0),
        ]
        .prop_map(|f| serde_json::Number::from_f64(f)
            .map_or_else(|| Value::String(if f.is_nan() { "NaN".into() } else if f > 0.0 { "Infinity".into() } else { "-Infinity".into() }), Value::Number)),
        3 => prop_oneof![
            Just("2024-01-31"),
            Just("2023-02-30"),
            Just("12.5"),
            Just("-1.5e3"),
            Just("waived"),
            Just("a \"quoted\" \\ text\n"),
            Just("ünïcode ✓"),
            Just(""),
            Just("2024-01-01T00:00:00.000000Z"),
        ]
        .prop_map(|t| Value::String(t.to_owned())),
        1 => prop::collection::vec(prop_oneof![Just(json!(1)), Just(json!("x")), Just(Value::Null), Just(json!(2.5))], 0..3)
            .prop_map(Value::Array),
        1 => Just(json!({"x": 1, "y": "z"})),
    ]
}

const NAMES: &[&str] = &["a", "b", "B", "a_string", "a_double", "t", "c.d"];

/// A page: distinct column names, rows of values, the namespace its source names.
type Page = (Vec<String>, Vec<Vec<Value>>, Option<String>);

/// A page: distinct names from `NAMES`, rows of values, a namespace.
fn page() -> impl Strategy<Value = Page> {
    (
        prop::sample::subsequence(NAMES, 1..NAMES.len()),
        prop::option::of(prop_oneof![
            Just("p_one".to_owned()),
            Just("p_two".to_owned())
        ]),
    )
        .prop_flat_map(|(names, namespace)| {
            let width = names.len();
            (
                Just(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()),
                prop::collection::vec(prop::collection::vec(cell_value(), width), 1..6),
                Just(namespace),
            )
        })
}

/// The pages as a batch of cell records (`cells`) or of the objects they stand for.
fn batch(pages: &[Page], cells: bool) -> SourceBatch {
    let mut batch = SourceBatch::default();
    for (names, rows, namespace) in pages {
        let mut page = CellPage::new(names.iter().cloned().collect()).unwrap();
        for row in rows {
            for value in row {
                match value {
                    Value::Null => page.push_null(),
                    Value::Bool(flag) => page.push_bool(*flag),
                    Value::Number(n) if n.as_i64().is_some() => page.push_long(n.as_i64().unwrap()),
                    Value::Number(n) if n.is_f64() => {
                        page.push_double(n.as_f64().unwrap()).unwrap()
                    }
                    Value::String(text) => page.push_text(text).unwrap(),
                    other => page.push_json(other.clone()).unwrap(),
                }
            }
        }
        let page = Arc::new(page);
        for row in crate::sources::cells::CellRow::all(&page) {
            let index = batch.records.len() as u64;
            batch.records.push(SourceRecord {
                value: if cells {
                    serde_json::Map::new()
                } else {
                    row.to_json()
                },
                position: Position {
                    uri: "postgres://h/t".into(),
                    offset: index + 1,
                    record: index + 1,
                },
                unparsed: None,
                cells: cells.then_some(row),
                namespace: namespace.as_deref().map(Into::into),
            });
        }
    }
    batch
}

fn infer(
    batch: &SourceBatch,
    sample: usize,
    transform: &TransformOptions,
) -> Option<PipelineSchema> {
    let mut inferrer = SchemaInferrer::new(transform.clone());
    for record in batch.records.iter().take(sample) {
        inferrer
            .add_or(&record.value, record.namespace.as_deref())
            .ok()?;
    }
    Some(inferrer.finish("p", "w"))
}

/// Type the pages both ways; `Some(true)` when they were typed with the schema as it is.
fn check(
    pages: &[Page],
    schema: &PipelineSchema,
    transform: &TransformOptions,
) -> Result<bool, TestCaseError> {
    let mut slow_batch = batch(pages, false);
    let slow = type_fitting(
        &mut slow_batch,
        schema,
        transform,
        &mut JsonLineTyper::default(),
    );
    let mut fast_batch = batch(pages, true);
    let fast = type_fitting(
        &mut fast_batch,
        schema,
        transform,
        &mut JsonLineTyper::default(),
    );
    prop_assert_eq!(fast.is_some(), slow.is_some());
    let typed = fast.is_some();
    match (fast, slow) {
        (Some(fast), Some(slow)) => prop_assert_eq!(ipc_bytes(fast), ipc_bytes(slow)),
        // Inference reads the cells as the objects they stand for, but for integers that
        // JSON inference would read as Unix times (cells never are: tested below).
        _ if pages
            .iter()
            .any(|(_, rows, _)| rows.iter().flatten().any(reads_as_unix_time)) => {}
        _ => {
            let mut inferred = Vec::new();
            for typed_batch in [&mut fast_batch, &mut slow_batch] {
                let mut evolved = schema.clone();
                let mut rejects = Vec::new();
                let Ok(done) = infer_and_type(
                    typed_batch,
                    &mut evolved,
                    transform,
                    &mut JsonLineTyper::default(),
                    ("p", "w"),
                    &mut |dl| rejects.push((dl.line, dl.error)),
                ) else {
                    return Err(TestCaseError::fail("inference failed"));
                };
                inferred.push((evolved, rejects, ipc_bytes(done.builders)));
            }
            prop_assert_eq!(&inferred[0], &inferred[1]);
        }
    }
    Ok(typed)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn typing_rows_from_their_cells_equals_typing_their_objects(
        pages in prop::collection::vec(page(), 1..4),
        sample_all in prop::bool::weighted(0.7),
        sample in 0..12usize,
        namespaced in prop::bool::weighted(0.1),
        flatten_events in prop::bool::weighted(0.1),
        merge_keys in super::tests::merge_keys(),
    ) {
        let transform = TransformOptions {
            namespace_fields: if namespaced { vec!["t".to_owned()] } else { vec![] },
            flatten_events,
            merge_keys,
            ..TransformOptions::default()
        };
        let all = batch(&pages, false);
        let sample = if sample_all { all.records.len() } else { sample };
        let Some(schema) = infer(&all, sample, &transform) else {
            return Ok(());
        };
        check(&pages, &schema, &transform)?;
    }
}

/// Rows whose cells fit their columns are typed without a JSON object being made.
#[test]
fn rows_that_fit_are_typed_from_their_cells_without_json() {
    let names: Vec<String> = ["id", "price", "day", "note", "ok", "tags"]
        .map(str::to_owned)
        .to_vec();
    let rows = vec![
        vec![
            json!(1),
            json!(6.5),
            json!("2026-10-04"),
            json!("x"),
            json!(true),
            json!(["a"]),
        ],
        vec![
            json!(2),
            json!(7),
            Value::Null,
            json!("é \"q\""),
            json!(false),
            json!([]),
        ],
        vec![
            json!(3),
            json!("12.50"),
            json!("2026-10-05"),
            Value::Null,
            Value::Null,
            Value::Null,
        ],
    ];
    let pages = vec![(names, rows, Some("postgres_orders".to_owned()))];
    let transform = TransformOptions::default();
    let schema = infer(&batch(&pages, false), 3, &transform).unwrap();
    assert!(check(&pages, &schema, &transform).unwrap());
    let mut fast = batch(&pages, true);
    let builders = type_fitting(
        &mut fast,
        &schema,
        &transform,
        &mut JsonLineTyper::default(),
    );
    assert!(builders.is_some_and(|b| b.contains_key("postgres_orders")));
    assert!(
        fast.records
            .iter()
            .all(|r| r.cells.is_some() && r.value.is_empty())
    );
    // A column the schema lacks: inference, with every record's object made.
    let mut wider = pages.clone();
    wider[0].0.push("new".into());
    for row in &mut wider[0].1 {
        row.push(json!(1));
    }
    assert!(!check(&wider, &schema, &transform).unwrap());
    let mut fast = batch(&wider, true);
    let mut typer = JsonLineTyper::default();
    assert!(type_fitting(&mut fast, &schema, &transform, &mut typer).is_none());
    let inferred = infer_rejecting_nothing(&mut fast, &schema, &transform, &mut typer);
    assert_eq!(inferred.builders["postgres_orders"].len(), rows_in(&wider));
    // Inferred and typed from the cells: no object made.
    assert!(
        fast.records
            .iter()
            .all(|r| r.cells.is_some() && r.value.is_empty())
    );
}

/// A page of `names` whose rows are pushed by `push` (one call per row).
fn cell_batch(
    names: &[&str],
    rows: usize,
    mut push: impl FnMut(usize, &mut CellPage),
) -> SourceBatch {
    let mut page = CellPage::new(names.iter().map(|n| (*n).to_owned()).collect()).unwrap();
    for row in 0..rows {
        push(row, &mut page);
    }
    pages_batch(&[Arc::new(page)])
}

/// Infer and type `batch` from an empty schema with a fresh typer, rejecting nothing.
fn infer_from_empty(batch: &mut SourceBatch, transform: &TransformOptions) -> Inferred {
    let mut typer = JsonLineTyper::default();
    infer_rejecting_nothing(
        batch,
        &PipelineSchema::empty("p", "w"),
        transform,
        &mut typer,
    )
}

/// The rows of `pages`, in order, as records of the namespace `postgres_t`.
fn pages_batch(pages: &[Arc<CellPage>]) -> SourceBatch {
    let mut batch = SourceBatch::default();
    for row in pages.iter().flat_map(crate::sources::cells::CellRow::all) {
        let index = batch.records.len() as u64 + 1;
        batch.records.push(SourceRecord {
            value: serde_json::Map::new(),
            position: Position {
                uri: "postgres://h/t".into(),
                offset: index,
                record: index,
            },
            unparsed: None,
            cells: Some(row),
            namespace: Some("postgres_t".into()),
        });
    }
    batch
}

/// The one column `name` of the namespace's batch.
fn column(inferred: &mut Inferred, name: &str) -> arrow::array::ArrayRef {
    let batch = inferred
        .builders
        .get_mut("postgres_t")
        .unwrap()
        .finish()
        .unwrap();
    batch.column_by_name(name).unwrap().clone()
}

/// 2024-01-01T00:00:00Z in microseconds.
const NEW_YEAR_2024: i64 = 1_704_067_200_000_000;

/// Integer cells keep their integer type whatever their values (a JSON integer in the range
/// of Unix seconds or milliseconds would be a timestamp), and instants are timestamps whether
/// their source named UTC or not.
#[test]
fn integer_cells_stay_integers_and_instants_are_timestamps() {
    let mut batch = cell_batch(&["order_number", "big", "at", "local"], 3, |row, page| {
        page.push_long(1_300_000_000 + row as i64);
        page.push_long(1_700_000_000_000 + row as i64);
        assert!(page.push_instant(NEW_YEAR_2024 + row as i64, true));
        assert!(page.push_instant(NEW_YEAR_2024 - 7, false));
    });
    let transform = TransformOptions::default();
    let mut inferred = infer_from_empty(&mut batch, &transform);
    let fields: Vec<(String, &str)> = inferred_schema(&batch, &transform).namespaces["postgres_t"]
        .fields
        .iter()
        .map(|f| (f.name.clone(), f.field_type.type_name()))
        .collect();
    assert_eq!(
        fields,
        [
            ("at".to_owned(), "timestamp"),
            ("big".to_owned(), "long"),
            ("local".to_owned(), "timestamp"),
            ("order_number".to_owned(), "int"),
        ]
    );
    let at = column(&mut inferred, "at");
    let at = at
        .as_any()
        .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(
        at.values().to_vec(),
        [NEW_YEAR_2024, NEW_YEAR_2024 + 1, NEW_YEAR_2024 + 2]
    );
}

fn inferred_schema(batch: &SourceBatch, transform: &TransformOptions) -> PipelineSchema {
    let mut inferrer = SchemaInferrer::new(transform.clone());
    for record in &batch.records {
        inferrer.add_record(record).unwrap();
    }
    inferrer.finish("p", "w")
}

/// A typed source's declared column types decide what its values leave open: an `int8`
/// column of small values is `long`, a column of NULLs has its declared type (not `string`);
/// values of another kind than declared are typed by what they are.
#[test]
fn declared_types_decide_small_integers_and_columns_of_nulls() {
    use crate::sources::cells::Declared;
    let names = ["id", "deleted_at", "flag", "day", "note", "odd"];
    let declared: Arc<[Option<Declared>]> = [
        Some(Declared::Long),
        Some(Declared::Timestamp),
        Some(Declared::Boolean),
        Some(Declared::Date),
        None,
        Some(Declared::Long),
    ]
    .into();
    let mut page = CellPage::new(names.iter().map(|n| (*n).to_owned()).collect())
        .unwrap()
        .with_declared(declared);
    for row in 0..2i64 {
        page.push_long(row);
        page.push_null();
        page.push_null();
        page.push_null();
        page.push_null();
        page.push_text("not a number").unwrap();
    }
    let mut batch = pages_batch(&[Arc::new(page)]);
    let transform = TransformOptions::default();
    let fields: Vec<(String, &str)> = inferred_schema(&batch, &transform).namespaces["postgres_t"]
        .fields
        .iter()
        .map(|f| (f.name.clone(), f.field_type.type_name()))
        .collect();
    assert_eq!(
        fields,
        [
            ("day".to_owned(), "date"),
            ("deleted_at".to_owned(), "timestamp"),
            ("flag".to_owned(), "boolean"),
            ("id".to_owned(), "long"),
            ("note".to_owned(), "string"),
            ("odd".to_owned(), "string"),
        ]
    );
    let inferred = infer_from_empty(&mut batch, &transform);
    assert_eq!(inferred.builders["postgres_t"].len(), 2);
}

/// A declared `numeric(p, s)` column is a decimal of that type when its text all fits
/// (NULLs only too), a string when a value does not (`NaN`, or more digits than declared).
#[test]
fn declared_decimals_are_decimals_when_every_value_fits() {
    use crate::sources::cells::Declared;
    let decimal = Some(Declared::Decimal {
        precision: 6,
        scale: 2,
    });
    let names = ["price", "nan", "empty"];
    let mut page = CellPage::new(names.iter().map(|n| (*n).to_owned()).collect())
        .unwrap()
        .with_declared([decimal; 3].into());
    for (price, nan) in [("1234.50", "1.00"), ("-0.05", "NaN")] {
        page.push_text(price).unwrap();
        page.push_text(nan).unwrap();
        page.push_null();
    }
    let mut batch = pages_batch(&[Arc::new(page)]);
    let transform = TransformOptions::default();
    let fields: Vec<String> = inferred_schema(&batch, &transform).namespaces["postgres_t"]
        .fields
        .iter()
        .map(|f| format!("{} {}", f.name, f.field_type))
        .collect();
    assert_eq!(
        fields,
        ["empty decimal(6,2)", "nan string", "price decimal(6,2)"]
    );
    let mut inferred = infer_from_empty(&mut batch, &transform);
    let price = column(&mut inferred, "price");
    let price = price
        .as_any()
        .downcast_ref::<arrow::array::Decimal128Array>()
        .unwrap();
    assert_eq!(price.values().to_vec(), [123_450, -5]);
}

/// Decimals of two scales declared for one column (altered while it was read): no decimal
/// holds both, so the column is a string of their text, whatever order they come in.
#[test]
fn decimals_of_two_scales_make_a_string_column() {
    use crate::sources::cells::Declared;
    let page_of = |precision, scale, text: &str| {
        let mut page = CellPage::new(["price".to_owned()].into_iter().collect())
            .unwrap()
            .with_declared([Some(Declared::Decimal { precision, scale })].into());
        page.push_text(text).unwrap();
        Arc::new(page)
    };
    let pages = [
        page_of(12, 4, "1.5000"),
        page_of(14, 2, "2.50"),
        page_of(10, 4, "0.1250"),
    ];
    let transform = TransformOptions::default();
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let mut batch = pages_batch(&order.map(|at| Arc::clone(&pages[at])));
        let schema = inferred_schema(&batch, &transform);
        assert_eq!(
            schema.namespaces["postgres_t"].fields,
            [crate::schema::Field::new(
                "price",
                crate::schema::FieldType::String
            )],
            "{order:?}"
        );
        let inferred = infer_from_empty(&mut batch, &transform);
        assert_eq!(inferred.builders["postgres_t"].len(), 3);
    }
}

/// A column that holds instants as text (a table written before they were typed) keeps
/// taking them as that text; a column with `infinity` among its instants is text.
#[test]
fn instants_land_as_text_in_a_string_column_and_beside_text() {
    let transform = TransformOptions::default();
    let mut typer = JsonLineTyper::default();
    let mut batch = cell_batch(&["at"], 2, |row, page| {
        if row == 0 {
            assert!(page.push_instant(NEW_YEAR_2024, true));
        } else {
            page.push_text("infinity").unwrap();
        }
    });
    let mut inferred = infer_rejecting_nothing(
        &mut batch,
        &PipelineSchema::empty("p", "w"),
        &transform,
        &mut typer,
    );
    let at = column(&mut inferred, "at");
    let at = at
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(
        at.iter().collect::<Vec<_>>(),
        [Some("2024-01-01T00:00:00.000000Z"), Some("infinity")]
    );
    // An old schema: `at` a string. The instants type straight into it, as their text.
    let old = inferred_schema(&batch, &transform);
    let mut batch = cell_batch(&["at"], 1, |_, page| {
        assert!(page.push_instant(NEW_YEAR_2024 + 1, false));
    });
    let mut builders = type_fitting(&mut batch, &old, &transform, &mut typer).unwrap();
    let at = builders.get_mut("postgres_t").unwrap().finish().unwrap();
    let at = at
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .unwrap();
    assert_eq!(at.value(0), "2024-01-01T00:00:00.000001");
}

/// A row the cell path refuses (a text beside a list: it goes to the sibling `tags_string`)
/// is typed from its object, where its instant's text still lands in the timestamp column: not a deadletter.
#[test]
fn a_row_typed_from_its_object_keeps_its_instant_a_timestamp() {
    let transform = TransformOptions::default();
    let mut batch = cell_batch(&["at", "tags"], 2, |row, page| {
        assert!(page.push_instant(NEW_YEAR_2024 + row as i64, true));
        if row == 0 {
            page.push_json(json!([1, 2])).unwrap();
        } else {
            page.push_text("x").unwrap();
        }
    });
    let mut inferred = infer_from_empty(&mut batch, &transform);
    let at = column(&mut inferred, "at");
    let at = at
        .as_any()
        .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        .unwrap();
    assert_eq!(at.values().to_vec(), [NEW_YEAR_2024, NEW_YEAR_2024 + 1]);
    assert_eq!(arrow::array::Array::null_count(at), 0);
}

/// Whether JSON inference could read `value` as a Unix time.
fn reads_as_unix_time(value: &Value) -> bool {
    value.as_i64().is_some_and(|int| {
        crate::schema::SECONDS_RANGE.contains(&int) || crate::schema::MILLIS_RANGE.contains(&int)
    })
}

fn rows_in(pages: &[Page]) -> usize {
    pages.iter().map(|(_, rows, _)| rows.len()).sum()
}

/// A `numeric` read as a decimal cell types exactly as its text did: the same schema and the
/// same columns, whether the declared type fits every value, a value has another scale or
/// too many digits, or no type is declared (an unconstrained `numeric`).
#[test]
fn decimal_cells_type_exactly_as_their_text() {
    use crate::sources::cells::{Declared, decimal_text};
    let declared = |precision, scale| Some(Declared::Decimal { precision, scale });
    // Per column: its name, declared type and values, `(unscaled, scale)` or NULL.
    type DecimalColumn = (&'static str, Option<Declared>, [Option<(i128, u8)>; 3]);
    let columns: [DecimalColumn; 4] = [
        (
            "fits",
            declared(6, 2),
            [Some((123_450, 2)), Some((-5, 2)), None],
        ),
        (
            "scales",
            declared(6, 2),
            [Some((1, 3)), Some((20, 1)), Some((0, 2))],
        ),
        (
            "digits",
            declared(6, 2),
            [Some((1_234_567_890, 2)), Some((1, 2)), None],
        ),
        ("open", None, [Some((125, 1)), Some((3, 0)), Some((-7, 5))]),
    ];
    let page_of = |typed: bool| {
        let names = columns
            .iter()
            .map(|(name, ..)| (*name).to_owned())
            .collect();
        let mut page = CellPage::new(names)
            .unwrap()
            .with_declared(columns.iter().map(|(_, d, _)| *d).collect());
        for row in 0..3 {
            for (_, _, values) in &columns {
                match values[row] {
                    None => page.push_null(),
                    Some((unscaled, scale)) if typed => {
                        assert!(page.push_decimal(unscaled, scale));
                    }
                    Some((unscaled, scale)) => {
                        page.push_text(&decimal_text(unscaled, scale)).unwrap();
                    }
                }
            }
        }
        Arc::new(page)
    };
    let transform = TransformOptions::default();
    let typed_as = |typed: bool| {
        let mut batch = pages_batch(&[page_of(typed)]);
        let schema = inferred_schema(&batch, &transform);
        let mut inferred = infer_from_empty(&mut batch, &transform);
        let columns = inferred
            .builders
            .get_mut("postgres_t")
            .unwrap()
            .finish()
            .unwrap();
        (schema.namespaces["postgres_t"].fields.clone(), columns)
    };
    let (text_fields, text_batch) = typed_as(false);
    let (cell_fields, cell_batch) = typed_as(true);
    assert_eq!(cell_fields, text_fields);
    assert_eq!(cell_batch, text_batch);
    // And the fitting column is a decimal column (the comparison above is not of nothing).
    let fits = text_fields.iter().find(|f| f.name == "fits").unwrap();
    assert_eq!(fits.field_type.to_string(), "decimal(6,2)");
}
