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
