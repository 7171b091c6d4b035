//! Queries over real WAL directories written with [`DiskWal`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int64Type, Schema};

use super::*;
use crate::config::{ValidatedConfig, load_file, validate};
use crate::wal::{BatchPart, WalOptions};

/// A project with pipelines `p` and `q` whose data directories are under the returned temp dir.
fn project() -> (tempfile::TempDir, ValidatedConfig) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.jsonl"), "").unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  p:\n    data_source: data_sources.s\n  q:\n    data_source: data_sources.s\n\
         data_sources:\n  s:\n    File:\n      path: events.jsonl\n",
    )
    .unwrap();
    let loaded = load_file(&dir.path().join("skippr.yml"), BTreeMap::new()).unwrap();
    let mut config = validate(&loaded, None).unwrap();
    for pipeline in config.pipelines.values_mut() {
        pipeline.data_dir = dir.path().join("data");
    }
    (dir, config)
}

fn wal_dir(config: &ValidatedConfig, pipeline: &str) -> std::path::PathBuf {
    config.pipelines[pipeline]
        .state_dir(&config.settings)
        .join("wal")
}

fn write(dir: &Path, batches: Vec<Vec<BatchPart>>) {
    let options = WalOptions {
        segment_target_bytes: 1 << 20,
        fsync: false,
        ..WalOptions::default()
    };
    let (mut wal, _) = DiskWal::open(dir, options).unwrap();
    for (i, parts) in batches.into_iter().enumerate() {
        wal.append(format!("pos{i}").as_bytes(), &parts).unwrap();
    }
}

fn part(namespace: &str, schema_version: u32, batch: RecordBatch) -> BatchPart {
    BatchPart {
        namespace: namespace.to_owned(),
        schema_version,
        batch,
    }
}

/// Rides: `id` (long), `city` (string), `price` (long).
fn rides(ids: &[i64], cities: &[&str], prices: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, true),
        Field::new("price", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(cities.to_vec())),
            Arc::new(Int64Array::from(prices.to_vec())),
        ],
    )
    .unwrap()
}

fn docks(ids: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("dock", DataType::Int64, true)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap()
}

fn engine(config: &ValidatedConfig, pipelines: &[&str]) -> QueryEngine {
    let pipelines: Vec<&ValidatedPipeline> = pipelines
        .iter()
        .map(|name| &config.pipelines[*name])
        .collect();
    QueryEngine::open(&config.settings, &pipelines).unwrap()
}

fn json(engine: &QueryEngine, sql: &str) -> serde_json::Value {
    let output = engine.sql(sql).unwrap();
    serde_json::from_str(&output.to_plain_json()).unwrap()
}

/// The `rows` of a plain JSON result.
fn rows(engine: &QueryEngine, sql: &str) -> serde_json::Value {
    json(engine, sql)["rows"].clone()
}

/// p: rides in 2 batches (5 rows), docks in 1; q: docks only.
fn two_pipelines() -> (tempfile::TempDir, ValidatedConfig) {
    let (dir, config) = project();
    write(
        &wal_dir(&config, "p"),
        vec![
            vec![
                part(
                    "rides",
                    1,
                    rides(&[1, 2, 3], &["oslo", "rome", "oslo"], &[10, 20, 30]),
                ),
                part("docks", 1, docks(&[7])),
            ],
            vec![part(
                "rides",
                1,
                rides(&[4, 5], &["rome", "oslo"], &[40, 50]),
            )],
        ],
    );
    write(
        &wal_dir(&config, "q"),
        vec![vec![part("docks", 1, docks(&[8, 9]))]],
    );
    (dir, config)
}

#[test]
fn tables_are_listed_per_pipeline_and_namespace() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p", "q"]);
    assert_eq!(engine.tables(), vec!["p.docks", "p.rides", "q.docks"]);
    assert_eq!(
        rows(&engine, "select count(*) from q.docks"),
        serde_json::json!([[2]])
    );
}

#[test]
fn a_streamed_result_has_the_rows_of_the_collected_one_and_namespaces_are_per_pipeline() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p", "q"]);
    assert_eq!(engine.namespaces("p"), vec!["docks", "rides"]);
    assert_eq!(engine.namespaces("q"), vec!["docks"]);
    assert!(engine.namespaces("nope").is_empty());
    let sql = table_sql("p", "rides");
    assert_eq!(sql, r#"SELECT * FROM "p"."rides""#);
    let collected = engine.sql(&sql).unwrap().rows();
    let stream = engine.sql_stream(&sql).unwrap();
    let streamed: usize = stream.map(|batch| batch.unwrap().num_rows()).sum();
    assert_eq!((collected, streamed), (5, 5));
    assert_eq!(table_sql("a\"b", "c"), r#"SELECT * FROM "a""b"."c""#);
    let error = engine.sql_stream("select * from p.nope").unwrap_err();
    assert!(error.to_string().contains("p.nope"), "{error}");
}

#[test]
fn count_filters_and_group_by_return_the_right_numbers() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p"]);
    assert_eq!(
        rows(&engine, "select count(*) from p.rides"),
        serde_json::json!([[5]])
    );
    assert_eq!(
        rows(
            &engine,
            "select id from p.rides where price > 25 and city = 'oslo' order by id"
        ),
        serde_json::json!([[3], [5]])
    );
    assert_eq!(
        rows(
            &engine,
            "select city, count(*) as n, sum(price) as total from p.rides group by city order by city"
        ),
        serde_json::json!([["oslo", 3, 90], ["rome", 2, 60]])
    );
    // With one pipeline, its tables can be named by namespace alone.
    assert_eq!(
        rows(&engine, "select count(*) from docks"),
        serde_json::json!([[1]])
    );
}

#[test]
fn batches_written_under_an_older_schema_read_as_the_newest() {
    let (_dir, config) = project();
    let old_struct = Fields::from(vec![Field::new("a", DataType::Int32, true)]);
    let old = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false).with_metadata(HashMap::from([(
                "PARQUET:field_id".to_owned(),
                "1".to_owned(),
            )])),
            Field::new("s", DataType::Struct(old_struct.clone()), true),
            Field::new("legacy", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StructArray::new(
                old_struct,
                vec![Arc::new(Int32Array::from(vec![11, 12])) as ArrayRef],
                None,
            )),
            Arc::new(StringArray::from(vec!["l1", "l2"])),
        ],
    )
    .unwrap();
    let new_struct = Fields::from(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let new = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false).with_metadata(HashMap::from([(
                "PARQUET:field_id".to_owned(),
                "1".to_owned(),
            )])),
            Field::new("s", DataType::Struct(new_struct.clone()), true),
            Field::new("name", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![3_000_000_000])),
            Arc::new(StructArray::new(
                new_struct,
                vec![
                    Arc::new(Int64Array::from(vec![13])) as ArrayRef,
                    Arc::new(StringArray::from(vec!["x"])),
                ],
                None,
            )),
            Arc::new(StringArray::from(vec!["new"])),
        ],
    )
    .unwrap();
    write(
        &wal_dir(&config, "p"),
        vec![vec![part("t", 1, old)], vec![part("t", 2, new)]],
    );
    let engine = engine(&config, &["p"]);
    let all = json(&engine, "select * from p.t order by id");
    assert_eq!(
        all["header"],
        serde_json::json!(["id", "s", "name", "legacy"])
    );
    assert_eq!(
        all["rows"],
        serde_json::json!([
            [1, {"a": 11, "b": null}, null, "l1"],
            [2, {"a": 12, "b": null}, null, "l2"],
            [3_000_000_000_i64, {"a": 13, "b": "x"}, "new", null],
        ])
    );
    let output = engine.sql("select id, s from p.t").unwrap();
    assert_eq!(output.schema.field(0).data_type(), &DataType::Int64);
    assert!(output.schema.field(0).metadata().is_empty());
    // Aggregates over batches of both versions (DataFusion checks that its inputs' schemas,
    // metadata included, agree).
    assert_eq!(
        rows(
            &engine,
            "select count(name), count(legacy), sum(id) from p.t"
        ),
        serde_json::json!([[1, 2, 3_000_000_003_i64]])
    );
}

#[test]
fn nested_struct_and_list_columns_can_be_queried() {
    let (_dir, config) = project();
    let fields = Fields::from(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let structs = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("x"), Some("y"), None])),
        ],
        None,
    );
    let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
        Some(vec![Some(1), Some(2)]),
        None,
        Some(vec![]),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("s", DataType::Struct(fields), true),
            Field::new("l", lists.data_type().clone(), true),
        ])),
        vec![Arc::new(structs), Arc::new(lists)],
    )
    .unwrap();
    write(&wal_dir(&config, "p"), vec![vec![part("n", 1, batch)]]);
    let engine = engine(&config, &["p"]);
    assert_eq!(
        rows(&engine, "select s['a'], s.b, l, array_length(l) from p.n"),
        serde_json::json!([
            [1, "x", [1, 2], 2],
            [null, "y", null, null],
            [3, null, [], 0],
        ])
    );
    assert_eq!(
        rows(&engine, "select sum(s['a']) from p.n where s.b is not null"),
        serde_json::json!([[1]])
    );
    assert_eq!(
        rows(&engine, "select l[1] from p.n"),
        serde_json::json!([[1], [null], [null]])
    );
}

#[test]
fn plain_json_output_has_a_header_and_rows_of_json_values() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p"]);
    let output = engine
        .sql(
            "select id, city, price * 1.5 as price, null as nothing, \
             to_date('2024-03-01') as day, to_timestamp('2024-03-01T12:00:00') as at, \
             id * 2 as twice from p.rides where id = 1",
        )
        .unwrap();
    assert_eq!(output.rows(), 1);
    assert_eq!(
        output.to_plain_json(),
        r#"{"header":["id","city","price","nothing","day","at","twice"],"rows":[[1,"oslo",15.0,null,"2024-03-01","2024-03-01T12:00:00",2]]}"#
    );
    let empty = engine.sql("select id from p.rides where id < 0").unwrap();
    assert_eq!(empty.to_plain_json(), r#"{"header":["id"],"rows":[]}"#);
}

#[test]
fn the_text_table_is_aligned_with_a_header() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p"]);
    let table = engine
        .sql("select id, city from p.rides where id <= 2 order by id")
        .unwrap()
        .to_table();
    assert_eq!(
        table,
        "+----+------+\n| id | city |\n+----+------+\n| 1  | oslo |\n| 2  | rome |\n+----+------+"
    );
    let empty = engine.sql("select id from p.rides where id < 0").unwrap();
    assert_eq!(empty.to_table(), "+----+\n| id |\n+----+\n+----+");
}

#[test]
fn bad_sql_gives_datafusions_error() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p"]);
    let error = engine.sql("selec * from p.rides").unwrap_err();
    assert!(matches!(error, QueryError::Sql(_)), "{error:?}");
    assert!(error.to_string().contains("SQL error"), "{error}");
    let error = engine.sql("select nope from p.rides").unwrap_err();
    assert!(error.to_string().contains("nope"), "{error}");
    assert!(!error.is_retryable());
}

#[test]
fn statements_that_change_data_are_refused() {
    let (_dir, config) = two_pipelines();
    let engine = engine(&config, &["p"]);
    let error = engine.sql("insert into p.docks values (1)").unwrap_err();
    assert!(error.to_string().contains("DML not supported"), "{error}");
    // Views and settings work.
    engine
        .sql("create view big as select * from p.rides where price > 30")
        .unwrap();
    assert_eq!(
        rows(&engine, "select count(*) from big"),
        serde_json::json!([[2]])
    );
}

#[test]
fn an_empty_wal_has_no_tables_and_a_missing_table_is_named_with_the_known_ones() {
    let (_dir, config) = two_pipelines();
    let (_empty_dir, empty_config) = project();
    let empty = engine(&empty_config, &["p"]);
    assert!(empty.tables().is_empty());
    let error = empty.sql("select * from p.x").unwrap_err();
    assert_eq!(
        error.to_string(),
        "table 'p.x' not found; there are no tables (no committed batches in the WALs queried)"
    );

    let engine = engine(&config, &["p", "q"]);
    let error = engine.sql("select * from p.x").unwrap_err();
    assert_eq!(
        error.to_string(),
        "table 'p.x' not found; known tables: p.docks, p.rides, q.docks"
    );
}

#[test]
fn refresh_sees_batches_committed_since_open() {
    let (_dir, config) = two_pipelines();
    let mut engine = engine(&config, &["p"]);
    engine
        .sql("set datafusion.execution.batch_size = 1024")
        .unwrap();
    engine
        .sql("create view cheap as select * from rides where price < 25")
        .unwrap();
    write(
        &wal_dir(&config, "p"),
        vec![vec![part("new_ns", 1, docks(&[1, 2, 3]))]],
    );
    assert_eq!(engine.tables(), vec!["p.docks", "p.rides"]);
    engine.refresh().unwrap();
    assert_eq!(engine.tables(), vec!["p.docks", "p.new_ns", "p.rides"]);
    // Views and settings made before the refresh are still there.
    engine.refresh().unwrap();
    assert_eq!(
        rows(&engine, "select count(*) from cheap"),
        serde_json::json!([[2]])
    );
    assert_eq!(
        rows(&engine, "select count(*) from p.new_ns"),
        serde_json::json!([[3]])
    );
}

#[test]
fn a_query_during_an_incomplete_append_sees_only_committed_batches_and_changes_no_file() {
    let (_dir, config) = two_pipelines();
    let dir = wal_dir(&config, "p");
    let options = WalOptions {
        segment_target_bytes: 1 << 20,
        fsync: false,
        ..WalOptions::default()
    };
    let (mut writer, _) = DiskWal::open(&dir, options).unwrap();
    crate::wal::failpoint::arm(crate::wal::failpoint::AFTER_DATA_WRITE, 0);
    let torn = writer.append(b"pos9", &[part("rides", 1, rides(&[6], &["oslo"], &[60]))]);
    crate::wal::failpoint::disarm();
    assert!(torn.is_err());
    let files = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(entry.path()).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let before = files();

    let engine = engine(&config, &["p"]);
    assert_eq!(
        rows(&engine, "select count(*) from p.rides"),
        serde_json::json!([[5]])
    );
    assert_eq!(files(), before);
    drop(writer);
}

/// A project whose pipeline `p` delivers to a `Duckdb` sink in `lake/`.
fn lake_project() -> (tempfile::TempDir, ValidatedConfig) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("events.jsonl"), "").unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  p:\n    data_source: data_sources.s\n    data_sink: data_sinks.lake\n\
         data_sources:\n  s:\n    File:\n      path: events.jsonl\n\
         data_sinks:\n  lake:\n    Duckdb:\n      warehouse: file://./lake\n",
    )
    .unwrap();
    let loaded = load_file(&dir.path().join("skippr.yml"), BTreeMap::new()).unwrap();
    let mut config = validate(&loaded, None).unwrap();
    for pipeline in config.pipelines.values_mut() {
        pipeline.data_dir = dir.path().join("data");
    }
    (dir, config)
}

/// Deliver the WAL batches with ids `1..=through` of pipeline `p` to its lake, without
/// acknowledging or reclaiming them: a crash right after the Iceberg commit.
fn deliver_through(config: &ValidatedConfig, through: u64, schema: &crate::schema::PipelineSchema) {
    let pipeline = &config.pipelines["p"];
    let sink = crate::sinks::open(pipeline).unwrap().unwrap();
    let wal = DiskWal::open_read_only(&wal_dir(config, "p")).unwrap();
    let batches: Vec<_> = wal
        .batches()
        .iter()
        .filter(|b| b.id.0 <= through)
        .cloned()
        .collect();
    sink.deliver(&batches, &mut |id| wal.read(id), schema)
        .unwrap();
}

fn rides_schema() -> crate::schema::PipelineSchema {
    use crate::schema::{Field as F, FieldType as T, NamespaceSchema};
    let mut schema = crate::schema::PipelineSchema::empty("p", "default");
    schema.namespaces.insert(
        "rides".into(),
        NamespaceSchema {
            fields: vec![
                F::new("id", T::Long),
                F::new("city", T::String),
                F::new("price", T::Long),
            ],
            records: 0,
        },
    );
    schema
}

#[test]
fn a_lake_table_and_its_unlanded_wal_batches_count_each_row_once() {
    let (_dir, config) = lake_project();
    write(
        &wal_dir(&config, "p"),
        vec![
            vec![part("rides", 1, rides(&[1, 2], &["a", "b"], &[10, 20]))],
            vec![part("rides", 1, rides(&[3], &["a"], &[30]))],
            vec![part("rides", 1, rides(&[4, 5], &["c", "a"], &[40, 50]))],
        ],
    );
    let pipelines: Vec<_> = config.pipelines.values().collect();
    let count = |engine: &QueryEngine| {
        let out = engine
            .sql("select count(*) as n, count(distinct id) as d, sum(price) as s from p.rides")
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&out.to_plain_json()).unwrap()
    };
    let before = count(&QueryEngine::open(&config.settings, &pipelines).unwrap());

    // Batches 1-2 land in the table but are not acknowledged: they are still in the WAL.
    deliver_through(&config, 2, &rides_schema());
    let engine = QueryEngine::open(&config.settings, &pipelines).unwrap();
    assert_eq!(count(&engine), before);
    assert_eq!(
        before,
        serde_json::json!({"header": ["n", "d", "s"], "rows": [[5, 5, 150]]})
    );
    // A filter on the landed side and the WAL side.
    let out = engine
        .sql("select id from p.rides where city = 'a' order by id")
        .unwrap()
        .to_plain_json();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["rows"], serde_json::json!([[1], [3], [5]]));

    // Everything landed: the same answer.
    deliver_through(&config, 3, &rides_schema());
    let engine = QueryEngine::open(&config.settings, &pipelines).unwrap();
    assert_eq!(count(&engine), before);
}

#[test]
fn a_lake_table_reads_old_files_after_a_struct_gained_a_field() {
    use crate::schema::{Field as F, FieldType as T, NamespaceSchema};
    let (_dir, config) = lake_project();
    let s1 = Fields::from(vec![Field::new("x", DataType::Int32, true)]);
    let s2 = Fields::from(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("y", DataType::Utf8, true),
    ]);
    let b1 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Struct(s1.clone()),
            true,
        )])),
        vec![Arc::new(
            StructArray::try_new(s1, vec![Arc::new(Int32Array::from(vec![1]))], None).unwrap(),
        )],
    )
    .unwrap();
    let b2 = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Struct(s2.clone()),
            true,
        )])),
        vec![Arc::new(
            StructArray::try_new(
                s2,
                vec![
                    Arc::new(Int32Array::from(vec![2])),
                    Arc::new(StringArray::from(vec!["two"])),
                ],
                None,
            )
            .unwrap(),
        )],
    )
    .unwrap();
    write(
        &wal_dir(&config, "p"),
        vec![vec![part("things", 1, b1)], vec![part("things", 2, b2)]],
    );
    let schema_with = |fields: Vec<F>| {
        let mut schema = crate::schema::PipelineSchema::empty("p", "default");
        schema
            .namespaces
            .insert("things".into(), NamespaceSchema { fields, records: 0 });
        schema
    };
    deliver_through(
        &config,
        1,
        &schema_with(vec![F::new("s", T::Struct(vec![F::new("x", T::Int)]))]),
    );
    deliver_through(
        &config,
        2,
        &schema_with(vec![F::new(
            "s",
            T::Struct(vec![F::new("x", T::Int), F::new("y", T::String)]),
        )]),
    );
    let pipelines: Vec<_> = config.pipelines.values().collect();
    let engine = QueryEngine::open(&config.settings, &pipelines).unwrap();
    let out = engine
        .sql("select s['x'] as x, s['y'] as y from p.things order by x")
        .unwrap()
        .to_plain_json();
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["rows"], serde_json::json!([[1, null], [2, "two"]]));
}
