#![allow(clippy::unwrap_used, reason = "tests")]

use serde_json::{Value, json};

use super::decode::{Decoder, numeric};

/// A binary numeric: digit groups, weight, sign, display scale.
fn num(digits: &[u16], weight: i16, sign: u16, dscale: u16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(digits.len() as u16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// Each decoder's cell for a value stands for the JSON value it decodes the value to.
mod cells {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::super::decode::Decoder;
    use crate::sources::cells::{CellPage, CellRow};

    fn as_cell(decoder: &Decoder, raw: &[u8]) -> Result<Value, String> {
        let mut page = CellPage::new(vec!["v".to_owned()].into()).unwrap();
        decoder.decode_cell(raw, &mut page)?;
        let page = std::sync::Arc::new(page);
        Ok(CellRow::all(&page).next().unwrap().to_json()["v"].clone())
    }

    fn decoders() -> impl Strategy<Value = Decoder> {
        prop::sample::select(vec![
            Decoder::Bool,
            Decoder::Int2,
            Decoder::Int4,
            Decoder::Int8,
            Decoder::Oid,
            Decoder::Float4,
            Decoder::Float8,
            Decoder::Numeric,
            Decoder::Text,
            Decoder::Char,
            Decoder::Date,
            Decoder::Timestamp,
            Decoder::Timestamptz,
            Decoder::Time,
            Decoder::Uuid,
            Decoder::Json,
            Decoder::Jsonb,
            Decoder::Bytea,
            Decoder::Array(Box::new(Decoder::Int4)),
            Decoder::Array(Box::new(Decoder::Text)),
        ])
    }

    /// Raw values of every length a decoder checks for, with the interesting 8-byte ones
    /// (timestamps at the ends of the ranges and the infinities).
    fn raw() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..20),
            any::<[u8; 1]>().prop_map(|b| b.to_vec()),
            any::<[u8; 2]>().prop_map(|b| b.to_vec()),
            any::<[u8; 4]>().prop_map(|b| b.to_vec()),
            any::<[u8; 8]>().prop_map(|b| b.to_vec()),
            any::<[u8; 16]>().prop_map(|b| b.to_vec()),
            prop_oneof![
                Just(i64::MAX),
                Just(i64::MIN),
                Just(0),
                Just(-1),
                Just(-63_082_281_600_000_000), // 0001-01-01
                Just(-63_082_281_600_000_001),
                Just(252_455_616_000_000_000), // 10000-01-01
                Just(252_455_615_999_999_999),
                -63_082_281_600_000_000i64..252_455_616_000_000_000,
            ]
            .prop_map(|micros| micros.to_be_bytes().to_vec()),
            "[a-zé✓ ]{0,8}".prop_map(|t| [&[1u8][..], t.as_bytes()].concat()),
        ]
    }

    /// Days and instants as typed cells (whose JSON form is their text) against the JSON
    /// path, every 13th day of the four-digit years, each day around both ends (where the
    /// cells become text), and 2000-01-01.
    #[test]
    fn dates_and_timestamps_are_written_as_chrono_writes_them() {
        let days = (-730_119i32..2_921_940)
            .step_by(13)
            .chain(-730_125..-730_110)
            .chain(2_921_930..2_921_950)
            .chain(-800..800);
        for day in days {
            let raw = day.to_be_bytes();
            assert_eq!(
                as_cell(&Decoder::Date, &raw),
                Decoder::Date.decode(&raw),
                "{day}"
            );
            let micros = i64::from(day) * 86_400_000_000 + 45_296_000_007;
            let raw = micros.to_be_bytes();
            assert_eq!(
                as_cell(&Decoder::Timestamptz, &raw),
                Decoder::Timestamptz.decode(&raw),
                "{micros}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn a_cell_stands_for_the_value_the_decoder_decodes(
            decoder in decoders(),
            raw in raw(),
        ) {
            prop_assert_eq!(as_cell(&decoder, &raw), decoder.decode(&raw));
        }
    }
}

#[test]
fn numeric_text_is_exact() {
    assert_eq!(numeric(&num(&[1, 2345], 1, 0, 2)).unwrap(), "12345.00");
    assert_eq!(numeric(&num(&[12, 3400], 0, 0x4000, 3)).unwrap(), "-12.340");
    assert_eq!(numeric(&num(&[5], -1, 0, 4)).unwrap(), "0.0005");
    assert_eq!(numeric(&num(&[50], -2, 0, 8)).unwrap(), "0.00000050");
    assert_eq!(numeric(&num(&[], 0, 0, 0)).unwrap(), "0");
    assert_eq!(numeric(&num(&[1], 2, 0, 0)).unwrap(), "100000000");
    assert_eq!(numeric(&num(&[], 0, 0xC000, 0)).unwrap(), "NaN");
    // 40 digits: past what a decimal(38) or a float holds.
    let forty = num(&[1234; 10], 9, 0, 0);
    assert_eq!(numeric(&forty).unwrap(), "1234".repeat(10));
    assert!(numeric(&[0, 1]).is_err());
}

/// The decimal cell of a `numeric`: its digits and display scale, or `None` (then its text
/// is kept) for `NaN`, the infinities, more than 38 digits, a scale past 38, a digit past
/// the scale, and cut-short bytes.
#[test]
fn numeric_decimal_cells_are_exact_or_none() {
    use super::decode::numeric_unscaled;
    assert_eq!(
        numeric_unscaled(&num(&[1, 2345], 1, 0, 2)),
        Some((1_234_500, 2))
    );
    assert_eq!(
        numeric_unscaled(&num(&[12, 3400], 0, 0x4000, 3)),
        Some((-12_340, 3))
    );
    assert_eq!(numeric_unscaled(&num(&[5], -1, 0, 4)), Some((5, 4)));
    assert_eq!(numeric_unscaled(&num(&[50], -2, 0, 8)), Some((50, 8)));
    assert_eq!(numeric_unscaled(&num(&[], 0, 0, 0)), Some((0, 0)));
    assert_eq!(numeric_unscaled(&num(&[], 0, 0, 3)), Some((0, 3)));
    assert_eq!(
        numeric_unscaled(&num(&[1], 2, 0, 0)),
        Some((100_000_000, 0))
    );
    for special in [0xC000, 0xD000, 0xF000] {
        assert_eq!(numeric_unscaled(&num(&[], 0, special, 0)), None);
    }
    // 40 and 39 digits; 38 is the most.
    assert_eq!(numeric_unscaled(&num(&[1234; 10], 9, 0, 0)), None);
    assert_eq!(
        numeric_unscaled(&num(
            &[999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999],
            9,
            0,
            0
        )),
        None
    );
    assert_eq!(
        numeric_unscaled(&num(
            &[99, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999],
            9,
            0,
            0
        )),
        Some((10i128.pow(38) - 1, 0))
    );
    assert_eq!(numeric_unscaled(&num(&[1], 0, 0, 39)), None);
    // 0.00005 shown with 4 digits: a digit past the scale.
    assert_eq!(numeric_unscaled(&num(&[5000], -2, 0, 4)), None);
    assert_eq!(numeric_unscaled(&num(&[1, 5000], 0, 0, 1)), Some((15, 1)));
    assert_eq!(numeric_unscaled(&num(&[1, 5100], 0, 0, 1)), None);
    let whole = num(&[1, 2345], 1, 0, 2);
    for cut in 0..whole.len() {
        assert_eq!(numeric_unscaled(&whole[..cut]), None, "cut at {cut}");
    }
}

#[test]
fn dates_timestamps_and_times_are_iso() {
    let days = |d: i32| Decoder::Date.decode(&d.to_be_bytes()).unwrap();
    assert_eq!(days(0), json!("2000-01-01"));
    assert_eq!(days(-1), json!("1999-12-31"));
    assert_eq!(days(i32::MAX), json!("infinity"));
    let micros = 86_400_000_000i64 + 1_234_567;
    assert_eq!(
        Decoder::Timestamptz.decode(&micros.to_be_bytes()).unwrap(),
        json!("2000-01-02T00:00:01.234567Z")
    );
    assert_eq!(
        Decoder::Timestamp.decode(&(-1i64).to_be_bytes()).unwrap(),
        json!("1999-12-31T23:59:59.999999")
    );
    assert_eq!(
        Decoder::Time
            .decode(&(3_723_000_001i64).to_be_bytes())
            .unwrap(),
        json!("01:02:03.000001")
    );
}

#[test]
fn scalars_and_bad_lengths() {
    assert_eq!(
        Decoder::Int8.decode(&(-5i64).to_be_bytes()).unwrap(),
        json!(-5)
    );
    assert_eq!(
        Decoder::Float8.decode(&f64::NAN.to_be_bytes()).unwrap(),
        json!("NaN")
    );
    assert_eq!(Decoder::Bool.decode(&[1]).unwrap(), json!(true));
    assert_eq!(Decoder::Bytea.decode(&[0, 255]).unwrap(), json!("\\x00ff"));
    assert_eq!(
        Decoder::Jsonb.decode(b"\x01{\"a\":1}").unwrap(),
        json!("{\"a\":1}")
    );
    let e = Decoder::Int4.decode(&[1, 2]).unwrap_err();
    assert!(e.contains("2 bytes where 4"), "{e}");
}

#[test]
fn arrays_nest_per_dimension_with_null_elements() {
    // int4[][] {{1,NULL},{3,4}}
    let mut raw = Vec::new();
    for v in [2i32, 1, 23, 2, 1, 2, 1] {
        raw.extend_from_slice(&v.to_be_bytes());
    }
    for v in [Some(1i32), None, Some(3), Some(4)] {
        match v {
            Some(v) => {
                raw.extend_from_slice(&4i32.to_be_bytes());
                raw.extend_from_slice(&v.to_be_bytes());
            }
            None => raw.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    let got = Decoder::Array(Box::new(Decoder::Int4))
        .decode(&raw)
        .unwrap();
    assert_eq!(got, json!([[1, Value::Null], [3, 4]]));
    let empty = [0u8; 12];
    assert_eq!(
        Decoder::Array(Box::new(Decoder::Text))
            .decode(&empty)
            .unwrap(),
        json!([])
    );
}

mod checkpoint {
    use super::super::reader::Chunk;
    use super::super::*;
    use crate::config::connectors::PostgresTableConfig;
    use serde_json::{Map, Value, json};

    fn options(tables: &[(&str, Option<&str>)]) -> PostgresSourceOptions {
        let mut config = tokio_postgres::Config::new();
        config
            .host("h")
            .port(1)
            .dbname("db")
            .user("u")
            .password("pw-secret");
        PostgresSourceOptions {
            server: server_name(&config),
            config,
            tls: crate::sources::postgres::tls::PgTls::Disable,
            schema: "public".into(),
            tables: tables
                .iter()
                .map(|(name, cursor)| PostgresTableConfig {
                    name: (*name).into(),
                    cursor_field: cursor.map(str::to_owned),
                    primary_key: Some(vec!["id".into()]),
                })
                .collect(),
            query: None,
            batch_rows: 2,
            sample_rows: None,
            cdc: None,
            typed_cells: false,
        }
    }

    /// `sslmode` from the key or from the connection string (where tokio-postgres does not
    /// know `verify-full`: it is negotiated as `require` and checked by our connector), and
    /// `sslrootcert` carried into `verify-full`.
    #[test]
    fn sslmode_resolves_from_the_key_or_the_connection_string() {
        use crate::config::connectors::{PgSslMode, PostgresSourceConfig};
        use crate::sources::postgres::tls::PgTls;
        let keys = |yaml: &str| -> PostgresSourceConfig { serde_norway::from_str(yaml).unwrap() };
        let resolved = |yaml: &str| {
            let options = PostgresSourceOptions::from_config(&keys(yaml)).unwrap();
            (options.tls, options.config.get_ssl_mode())
        };
        use tokio_postgres::config::SslMode;
        assert_eq!(resolved("database: d"), (PgTls::Prefer, SslMode::Prefer));
        assert_eq!(
            resolved("database: d\nsslmode: disable"),
            (PgTls::Disable, SslMode::Disable)
        );
        assert_eq!(
            resolved("database: d\nsslmode: require"),
            (PgTls::Require, SslMode::Require)
        );
        assert_eq!(
            resolved("database: d\nsslmode: verify-full\nsslrootcert: /etc/ca.pem"),
            (
                PgTls::VerifyFull {
                    root_cert: Some("/etc/ca.pem".into())
                },
                SslMode::Require
            )
        );
        let from_url = |url: &str, root: Option<&str>| {
            let mut c = keys("{}");
            c.connection_string = Some(crate::config::secret::Secret::new(url));
            c.sslrootcert = root.map(Into::into);
            c.sslmode = Some(PgSslMode::Disable); // the string's own sslmode wins
            let options = PostgresSourceOptions::from_config(&c).unwrap();
            (options.tls, options.config.get_ssl_mode())
        };
        assert_eq!(
            from_url("postgresql://u:p@h/db", None),
            (PgTls::Prefer, SslMode::Prefer)
        );
        assert_eq!(
            from_url("postgresql://u:p@h/db?sslmode=require", None),
            (PgTls::Require, SslMode::Require)
        );
        assert_eq!(
            from_url("host=h dbname=db sslmode=verify-full", Some("ca.pem")),
            (
                PgTls::VerifyFull {
                    root_cert: Some("ca.pem".into())
                },
                SslMode::Require
            )
        );
    }

    fn rows(n: usize) -> Vec<Map<String, Value>> {
        (0..n)
            .map(|i| json!({"id": i}).as_object().unwrap().clone())
            .collect()
    }

    /// Plan the pass as `start` would, without a server.
    fn planned(source: &mut PostgresSource) {
        let names: Vec<String> = source
            .options
            .tables
            .iter()
            .map(|t| format!("public.{}", t.name))
            .collect();
        source.plans = Some(
            names
                .iter()
                .map(|name| reader::Plan {
                    name: name.clone(),
                    start: TableStart::default(),
                })
                .collect(),
        );
        source.state.in_pass = true;
    }

    #[test]
    fn the_last_batch_of_a_pass_leaves_the_next_pass_start_and_keeps_cursor_keys() {
        let mut source =
            PostgresSource::open_at(options(&[("full", None), ("inc", Some("at"))]), None).unwrap();
        assert_eq!(source.options.server, "h:1/db");
        planned(&mut source);
        let batch = source
            .take(Chunk {
                table: 0,
                rows: reader::Rows::Json(rows(2)),
                last_key: Some(vec!["2".into()]),
                end: true,
                last_of_pass: false,
            })
            .unwrap();
        assert_eq!(batch.records.len(), 2);
        assert_eq!(
            &*batch.records[1].position.uri,
            "postgres://h:1/db/public.full"
        );
        assert_eq!(batch.records[1].namespace.as_deref(), Some("postgres_full"));
        let mid: PostgresCheckpoint =
            serde_json::from_slice(&source.checkpoint().unwrap()).unwrap();
        assert!(mid.in_pass);
        assert!(mid.tables["public.full"].done);
        source.take(Chunk {
            table: 1,
            rows: reader::Rows::Json(rows(1)),
            last_key: Some(vec!["t9".into(), "9".into()]),
            end: true,
            last_of_pass: true,
        });
        let bytes = source.checkpoint().unwrap();
        let done: PostgresCheckpoint = serde_json::from_slice(&bytes).unwrap();
        assert!(!done.in_pass);
        assert_eq!(done.tables["public.full"].key, None);
        assert!(!done.tables["public.full"].done);
        assert_eq!(
            done.tables["public.inc"].key,
            Some(vec!["t9".to_owned(), "9".to_owned()])
        );
        assert!(!String::from_utf8_lossy(&bytes).contains("pw-secret"));
    }

    #[test]
    fn a_checkpoint_of_another_version_is_refused_and_of_another_server_starts_over() {
        let opts = options(&[("t", None)]);
        let other = PostgresCheckpoint {
            version: POSTGRES_CHECKPOINT_VERSION + 1,
            ..PostgresCheckpoint::default()
        };
        let e = PostgresSource::open_at(opts.clone(), Some(&serde_json::to_vec(&other).unwrap()))
            .unwrap_err();
        assert!(matches!(e, SourceError::BadCheckpoint { .. }), "{e}");
        assert!(e.to_string().contains("h:1/db/public"), "{e}");
        let e = PostgresSource::open_at(opts.clone(), Some(b"not json")).unwrap_err();
        assert!(matches!(e, SourceError::BadCheckpoint { .. }), "{e}");
        let elsewhere = PostgresCheckpoint {
            version: POSTGRES_CHECKPOINT_VERSION,
            source: "other:5432/db/public".into(),
            in_pass: true,
            ..PostgresCheckpoint::default()
        };
        let source =
            PostgresSource::open_at(opts, Some(&serde_json::to_vec(&elsewhere).unwrap())).unwrap();
        assert!(!source.state.in_pass);
        assert_eq!(source.state.source, "h:1/db/public");
    }
}
