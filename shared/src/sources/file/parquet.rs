//! Parquet: read in Arrow record batches, each row turned into a JSON object.
//!
//! Rows are converted by arrow's JSON writer with explicit nulls and a few encoders of our own
//! (which apply at any depth): nested structs become objects, lists arrays, maps objects,
//! timestamps (any unit, any time zone) integer Unix epoch milliseconds (rounded down),
//! dates (`Date32` and `Date64`) `"YYYY-MM-DD"` strings, decimals JSON numbers (the nearest
//! `f64`; `null` beyond its range), binary lower-case hex strings, and floats JSON numbers,
//! but for NaN and the infinities, which JSON has no numbers for: they become the strings
//! `"NaN"`, `"Infinity"` and `"-Infinity"` (as the Postgres source spells them), which a
//! `double` column takes as those very values (see the schema's numeric strings). arrow's own
//! encoder would write them as `null`, losing them without a word.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::Path;

use std::sync::Arc;

use arrow::array::{Array, AsArray, PrimitiveArray};
use arrow::buffer::ScalarBuffer;
use arrow::datatypes::{
    ArrowNativeType, DataType, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type,
    Decimal256Type, DecimalType, FieldRef, Float16Type, Float32Type, Float64Type, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow::error::ArrowError;
use arrow::json::WriterBuilder;
use arrow::json::writer::{
    Encoder, EncoderFactory, EncoderOptions, LineDelimited, NullableEncoder,
};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::reader::ChunkReader;
use serde_json::{Map, Value};

use super::compression::open_listed_file;
use super::reader::{FileContext, Item, RecordReader, Resume};
use crate::sources::SourceError;

/// The most rows decoded at once.
const MAX_ARROW_BATCH_ROWS: usize = 8 * 1024;

/// Reads a Parquet file row by row.
pub(crate) struct ParquetReader {
    ctx: FileContext,
    batches: ParquetRecordBatchReader,
    /// Rows converted but not yet handed out.
    pending: VecDeque<Map<String, Value>>,
    /// Rows handed out so far (the 0-based index of the next row).
    next_row: u64,
    /// Rows in the file.
    total_rows: u64,
    /// The file's size in bytes.
    file_size: u64,
    done: bool,
}

impl ParquetReader {
    /// Open the Parquet file at `path`, reading `batch_rows` rows at a time after skipping
    /// the first `skip_rows`.
    pub(crate) fn open(
        ctx: FileContext,
        path: &Path,
        file_size: u64,
        batch_rows: usize,
        skip_rows: u64,
    ) -> Result<Self, SourceError> {
        let file = open_listed_file(path, &ctx.uri)?;
        Self::from_input(ctx, file, file_size, batch_rows, skip_rows)
    }

    /// Read the Parquet file `input` (any random-access input: a file, an S3 object read by
    /// ranges), `batch_rows` rows at a time after skipping the first `skip_rows`.
    pub(crate) fn from_input<T: ChunkReader + 'static>(
        ctx: FileContext,
        input: T,
        file_size: u64,
        batch_rows: usize,
        skip_rows: u64,
    ) -> Result<Self, SourceError> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(input)
            .map_err(|error| parquet_error(&ctx, &error))?;
        let total_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let skip_rows = skip_rows.min(total_rows);
        let mut builder = builder.with_batch_size(batch_rows.clamp(1, MAX_ARROW_BATCH_ROWS));
        if skip_rows > 0 {
            builder = builder.with_offset(usize::try_from(skip_rows).unwrap_or(usize::MAX));
        }
        let batches = builder
            .build()
            .map_err(|error| parquet_error(&ctx, &error))?;
        Ok(ParquetReader {
            ctx,
            batches,
            pending: VecDeque::new(),
            next_row: skip_rows,
            total_rows,
            file_size,
            done: false,
        })
    }

    /// Convert the next Arrow batch into pending rows; false at the end of the file.
    fn fill(&mut self) -> Result<bool, SourceError> {
        match self.batches.next() {
            None => Ok(false),
            Some(Err(error)) => Err(parquet_error(&self.ctx, &error)),
            Some(Ok(batch)) => {
                let rows = batch_to_json(&batch).map_err(|message| SourceError::Parquet {
                    path: self.ctx.uri.to_string(),
                    message,
                })?;
                self.pending.extend(rows);
                Ok(true)
            }
        }
    }
}

impl RecordReader for ParquetReader {
    fn next_item(&mut self) -> Result<Option<Item>, SourceError> {
        while self.pending.is_empty() {
            if self.done {
                return Ok(None);
            }
            if !self.fill()? {
                self.done = true;
            }
        }
        let Some(value) = self.pending.pop_front() else {
            return Ok(None);
        };
        self.next_row += 1;
        Ok(Some(self.ctx.record(value, self.next_row, self.next_row)))
    }

    fn consumed(&self) -> u64 {
        if self.total_rows == 0 {
            return 0;
        }
        let share = u128::from(self.file_size) * u128::from(self.next_row.min(self.total_rows))
            / u128::from(self.total_rows);
        u64::try_from(share).unwrap_or(self.file_size)
    }

    fn resume_point(&self) -> Resume {
        Resume {
            offset: self.next_row,
            records: self.next_row,
        }
    }
}

fn parquet_error(ctx: &FileContext, error: &dyn std::fmt::Display) -> SourceError {
    SourceError::Parquet {
        path: ctx.uri.to_string(),
        message: crate::sources::error::lower_first(&error.to_string()),
    }
}

/// Arrow-to-JSON encoders for the types whose default encoding loses information skipprd
/// wants: timestamps, `Date64`, decimals and floats (NaN and the infinities).
#[derive(Debug)]
struct TypedEncoders;

impl EncoderFactory for TypedEncoders {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let encoder: Box<dyn Encoder + 'a> = match array.data_type() {
            DataType::Timestamp(unit, _) => {
                let (values, per_milli, milli_per) = match unit {
                    TimeUnit::Second => (
                        array.as_primitive::<TimestampSecondType>().values().clone(),
                        1,
                        1000,
                    ),
                    TimeUnit::Millisecond => (
                        array
                            .as_primitive::<TimestampMillisecondType>()
                            .values()
                            .clone(),
                        1,
                        1,
                    ),
                    TimeUnit::Microsecond => (
                        array
                            .as_primitive::<TimestampMicrosecondType>()
                            .values()
                            .clone(),
                        1000,
                        1,
                    ),
                    TimeUnit::Nanosecond => (
                        array
                            .as_primitive::<TimestampNanosecondType>()
                            .values()
                            .clone(),
                        1_000_000,
                        1,
                    ),
                };
                Box::new(EpochMillis {
                    values,
                    per_milli,
                    milli_per,
                })
            }
            DataType::Date64 => Box::new(Date64Days(
                array.as_primitive::<Date64Type>().values().clone(),
            )),
            DataType::Decimal32(_, _) => {
                Box::new(DecimalNumber::<Decimal32Type>(array.as_primitive().clone()))
            }
            DataType::Decimal64(_, _) => {
                Box::new(DecimalNumber::<Decimal64Type>(array.as_primitive().clone()))
            }
            DataType::Decimal128(_, _) => Box::new(DecimalNumber::<Decimal128Type>(
                array.as_primitive().clone(),
            )),
            DataType::Decimal256(_, _) => Box::new(DecimalNumber::<Decimal256Type>(
                array.as_primitive().clone(),
            )),
            DataType::Float16 => Box::new(FloatNumber(
                array.as_primitive::<Float16Type>().values().clone(),
            )),
            DataType::Float32 => Box::new(FloatNumber(
                array.as_primitive::<Float32Type>().values().clone(),
            )),
            DataType::Float64 => Box::new(FloatNumber(
                array.as_primitive::<Float64Type>().values().clone(),
            )),
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(encoder, array.logical_nulls())))
    }
}

/// Timestamps as integer epoch milliseconds: `value / per_milli * milli_per`, rounded down.
struct EpochMillis {
    values: ScalarBuffer<i64>,
    /// Units in a millisecond (1 for seconds and milliseconds).
    per_milli: i64,
    /// Milliseconds in a unit (1 but for seconds).
    milli_per: i64,
}

impl Encoder for EpochMillis {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let millis = self.values[idx]
            .div_euclid(self.per_milli)
            .saturating_mul(self.milli_per);
        out.extend_from_slice(millis.to_string().as_bytes());
    }
}

/// `Date64` values (milliseconds since the epoch) as `"YYYY-MM-DD"`, like `Date32`.
struct Date64Days(ScalarBuffer<i64>);

impl Encoder for Date64Days {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        match chrono::DateTime::from_timestamp_millis(self.0[idx]) {
            Some(at) => {
                let day = at.date_naive().format("%Y-%m-%d").to_string();
                out.push(b'"');
                out.extend_from_slice(day.as_bytes());
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
    }
}

/// Decimals as JSON numbers: the `f64` nearest the exact decimal, `null` beyond its range.
struct DecimalNumber<T: DecimalType>(PrimitiveArray<T>);

impl<T: DecimalType> Encoder for DecimalNumber<T> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let number = self
            .0
            .value_as_string(idx)
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64);
        match number {
            Some(number) => out.extend_from_slice(number.to_string().as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
    }
}

/// Floats as JSON numbers (the shortest text that reads back as the same float, always with
/// a fraction or an exponent, so it stays a float), and NaN and the infinities as the strings
/// `"NaN"`, `"Infinity"` and `"-Infinity"`.
struct FloatNumber<T: ArrowNativeType>(ScalarBuffer<T>);

impl<T: ArrowNativeType + Into<f64>> Encoder for FloatNumber<T> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let value = self.0[idx];
        let wide: f64 = value.into();
        if wide.is_finite() {
            // `Debug` is the shortest text that reads back as the same `T` (so `0.1f32` is
            // `0.1`), in decimal or exponent form, and keeps `.0` on whole numbers. Writing to
            // a vector cannot fail.
            let _ = write!(out, "{value:?}");
        } else if wide.is_nan() {
            out.extend_from_slice(br#""NaN""#);
        } else if wide > 0.0 {
            out.extend_from_slice(br#""Infinity""#);
        } else {
            out.extend_from_slice(br#""-Infinity""#);
        }
    }
}

/// The rows of `batch` as JSON objects, in order.
pub(crate) fn batch_to_json(batch: &RecordBatch) -> Result<Vec<Map<String, Value>>, String> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .with_encoder_factory(Arc::new(TypedEncoders))
        .build::<_, LineDelimited>(Vec::new());
    writer
        .write(batch)
        .and_then(|()| writer.finish())
        .map_err(|error| format!("cannot convert rows to JSON: {error}"))?;
    let text = writer.into_inner();
    let mut rows = Vec::with_capacity(batch.num_rows());
    for line in text.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let row = serde_json::from_slice::<Map<String, Value>>(line)
            .map_err(|error| format!("cannot convert rows to JSON: {error}"))?;
        rows.push(row);
    }
    if rows.len() != batch.num_rows() {
        return Err(format!(
            "converted {} rows to JSON but the batch has {}",
            rows.len(),
            batch.num_rows()
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use arrow::array::{
        ArrayRef, Date32Array, Float64Array, Int64Array, ListBuilder, StringArray, StructArray,
        TimestampMillisecondArray,
    };
    use arrow::datatypes::{DataType, Field};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::super::testing::*;
    use super::super::{FileSource, FileSourceOptions};
    use super::*;
    use crate::sources::Source;

    /// A batch of `rows` rows with a nested struct, a list, a date, a timestamp and nulls.
    fn sample_batch(first: i64, rows: usize) -> RecordBatch {
        let ids: Vec<i64> = (first..first + rows as i64).collect();
        let id: ArrayRef = Arc::new(Int64Array::from(ids.clone()));
        let name: ArrayRef = Arc::new(StringArray::from(
            ids.iter()
                .map(|i| (i % 3 != 0).then(|| format!("n{i}")))
                .collect::<Vec<_>>(),
        ));
        let city: ArrayRef = Arc::new(StringArray::from(
            ids.iter()
                .map(|i| (i % 2 == 0).then(|| "Oslo".to_owned()))
                .collect::<Vec<_>>(),
        ));
        let lat: ArrayRef = Arc::new(Float64Array::from(
            ids.iter().map(|i| *i as f64 + 0.5).collect::<Vec<_>>(),
        ));
        let address: ArrayRef = Arc::new(StructArray::from(vec![
            (Arc::new(Field::new("city", DataType::Utf8, true)), city),
            (Arc::new(Field::new("lat", DataType::Float64, false)), lat),
        ]));
        let mut tags = ListBuilder::new(arrow::array::StringBuilder::new());
        for i in &ids {
            if i % 4 == 3 {
                tags.append_null();
            } else {
                for t in 0..(i % 3) {
                    tags.values().append_value(format!("t{t}"));
                }
                tags.append(true);
            }
        }
        let tags: ArrayRef = Arc::new(tags.finish());
        // 2024-01-01 is day 19723 since the epoch.
        let day: ArrayRef = Arc::new(Date32Array::from(
            ids.iter().map(|i| 19_723 + *i as i32).collect::<Vec<_>>(),
        ));
        let at: ArrayRef = Arc::new(TimestampMillisecondArray::from(
            ids.iter().map(|i| i * 1000).collect::<Vec<_>>(),
        ));
        RecordBatch::try_from_iter(vec![
            ("id", id),
            ("name", name),
            ("address", address),
            ("tags", tags),
            ("day", day),
            ("at", at),
        ])
        .unwrap()
    }

    fn write_parquet(path: &Path, batches: &[RecordBatch]) {
        let file = std::fs::File::create(path).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(40))
            .build();
        let mut writer = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
        for batch in batches {
            writer.write(batch).unwrap();
        }
        writer.close().unwrap();
    }

    #[test]
    fn nested_structs_lists_dates_timestamps_and_nulls_read_back_as_json() {
        let dir = tempfile::tempdir().unwrap();
        write_parquet(&dir.path().join("x.parquet"), &[sample_batch(0, 8)]);
        let (records, dead) = read_all(options(dir.path(), "x.parquet")).unwrap();
        assert!(dead.is_empty());
        assert_eq!(records.len(), 8);
        assert_eq!(
            values(&records[..4]),
            vec![
                r#"{"id":0,"name":null,"address":{"city":"Oslo","lat":0.5},"tags":[],"day":"2024-01-01","at":0}"#,
                r#"{"id":1,"name":"n1","address":{"city":null,"lat":1.5},"tags":["t0"],"day":"2024-01-02","at":1000}"#,
                r#"{"id":2,"name":"n2","address":{"city":"Oslo","lat":2.5},"tags":["t0","t1"],"day":"2024-01-03","at":2000}"#,
                r#"{"id":3,"name":null,"address":{"city":null,"lat":3.5},"tags":null,"day":"2024-01-04","at":3000}"#,
            ]
        );
        let positions: Vec<(u64, u64)> = records
            .iter()
            .map(|r| (r.position.offset, r.position.record))
            .collect();
        assert_eq!(positions[0], (1, 1));
        assert_eq!(positions[7], (8, 8));
        assert_eq!(&*records[0].position.uri, "x.parquet");
    }

    #[test]
    fn timestamps_become_epoch_milliseconds_dates_stay_dates_and_decimals_become_numbers() {
        use arrow::array::{
            BinaryArray, Decimal128Array, MapBuilder, TimestampMicrosecondArray,
            TimestampNanosecondArray, TimestampSecondArray,
        };
        use arrow::datatypes::TimeUnit;

        // 2024-01-02T03:04:05.678901Z, in seconds and in microseconds.
        let seconds = 1_704_164_645i64;
        let micros = seconds * 1_000_000 + 678_901;
        let ts_us: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![Some(micros), None, Some(-1)])
                .with_timezone("UTC"),
        );
        let ts_s: ArrayRef = Arc::new(TimestampSecondArray::from(vec![
            Some(seconds),
            Some(0),
            None,
        ]));
        let day: ArrayRef = Arc::new(Date32Array::from(vec![Some(19_724), None, Some(-1)]));
        let amount: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(12_345), Some(-5), None])
                .with_precision_and_scale(10, 2)
                .unwrap(),
        );
        let blob: ArrayRef = Arc::new(BinaryArray::from(vec![
            Some(&[0xde, 0xad][..]),
            Some(&[][..]),
            None,
        ]));
        // Nested: a struct holding a timestamp (with an offset time zone) and a decimal.
        let nested_at: ArrayRef = Arc::new(
            TimestampNanosecondArray::from(vec![Some(micros * 1000), Some(1_500_000), None])
                .with_timezone("+02:00"),
        );
        let nested_price: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(15), None, Some(-1)])
                .with_precision_and_scale(5, 1)
                .unwrap(),
        );
        let nested: ArrayRef = Arc::new(StructArray::from(vec![
            (
                Arc::new(Field::new(
                    "at",
                    DataType::Timestamp(TimeUnit::Nanosecond, Some("+02:00".into())),
                    true,
                )),
                nested_at,
            ),
            (
                Arc::new(Field::new("price", DataType::Decimal128(5, 1), true)),
                nested_price,
            ),
        ]));
        // A list of timestamps and a map to timestamps.
        let mut list = ListBuilder::new(arrow::array::TimestampMillisecondBuilder::new());
        list.values().append_value(1_000);
        list.values().append_value(2_000);
        list.append(true);
        list.append(true);
        list.append_null();
        let list: ArrayRef = Arc::new(list.finish());
        let mut map = MapBuilder::new(
            None,
            arrow::array::StringBuilder::new(),
            arrow::array::TimestampSecondBuilder::new(),
        );
        map.keys().append_value("first");
        map.values().append_value(1);
        map.append(true).unwrap();
        map.append(true).unwrap();
        map.append(false).unwrap();
        let map: ArrayRef = Arc::new(map.finish());
        let batch = RecordBatch::try_from_iter(vec![
            ("ts_us", ts_us),
            ("ts_s", ts_s),
            ("day", day),
            ("amount", amount),
            ("blob", blob),
            ("nested", nested),
            ("list", list),
            ("map", map),
        ])
        .unwrap();

        let dir = tempfile::tempdir().unwrap();
        write_parquet(&dir.path().join("typed.parquet"), &[batch]);
        let (records, dead) = read_all(options(dir.path(), "typed.parquet")).unwrap();
        assert!(dead.is_empty());
        assert_eq!(
            values(&records),
            vec![
                concat!(
                    r#"{"ts_us":1704164645678,"ts_s":1704164645000,"day":"2024-01-02","#,
                    r#""amount":123.45,"blob":"dead","nested":{"at":1704164645678,"price":1.5},"#,
                    r#""list":[1000,2000],"map":{"first":1000}}"#
                ),
                concat!(
                    r#"{"ts_us":null,"ts_s":0,"day":null,"amount":-0.05,"blob":"","#,
                    r#""nested":{"at":1,"price":null},"list":[],"map":{}}"#
                ),
                concat!(
                    r#"{"ts_us":-1,"ts_s":null,"day":"1969-12-31","amount":null,"blob":null,"#,
                    r#""nested":{"at":null,"price":-0.1},"list":null,"map":null}"#
                ),
            ]
        );
    }

    #[test]
    fn date64_values_are_written_as_dates_and_timestamps_before_1970_round_down() {
        use arrow::array::{Date64Array, TimestampNanosecondArray};
        let day: ArrayRef = Arc::new(Date64Array::from(vec![1_704_153_600_000, -1]));
        let at: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![1, -1]));
        let batch = RecordBatch::try_from_iter(vec![("day", day), ("at", at)]).unwrap();
        let rows: Vec<String> = batch_to_json(&batch)
            .unwrap()
            .into_iter()
            .map(|row| Value::Object(row).to_string())
            .collect();
        assert_eq!(
            rows,
            vec![
                r#"{"day":"2024-01-02","at":0}"#,
                r#"{"day":"1969-12-31","at":-1}"#
            ]
        );
    }

    #[test]
    fn nan_and_the_infinities_become_their_words_not_null_and_finite_floats_stay_floats() {
        use arrow::array::{Float16Array, Float32Array};
        type F16 = <Float16Type as arrow::datatypes::ArrowPrimitiveType>::Native;
        let f64s: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(f64::NAN),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(1.5),
            None,
            Some(-0.0),
            Some(3.0),
            Some(1e300),
        ]));
        let f32s: ArrayRef = Arc::new(Float32Array::from(vec![
            Some(f32::NAN),
            Some(f32::INFINITY),
            Some(f32::NEG_INFINITY),
            Some(0.1),
            None,
            Some(-0.0),
            Some(3.0),
            Some(1e38),
        ]));
        let f16s: ArrayRef = Arc::new(Float16Array::from(vec![
            Some(F16::NAN),
            Some(F16::INFINITY),
            Some(F16::NEG_INFINITY),
            Some(F16::from_f32(0.5)),
            None,
            Some(F16::NEG_ZERO),
            Some(F16::from_f32(3.0)),
            Some(F16::from_f32(2048.0)),
        ]));
        let batch =
            RecordBatch::try_from_iter(vec![("d", f64s), ("f", f32s), ("h", f16s)]).unwrap();
        let rows: Vec<String> = batch_to_json(&batch)
            .unwrap()
            .into_iter()
            .map(|row| Value::Object(row).to_string())
            .collect();
        assert_eq!(
            rows,
            vec![
                r#"{"d":"NaN","f":"NaN","h":"NaN"}"#,
                r#"{"d":"Infinity","f":"Infinity","h":"Infinity"}"#,
                r#"{"d":"-Infinity","f":"-Infinity","h":"-Infinity"}"#,
                r#"{"d":1.5,"f":0.1,"h":0.5}"#,
                r#"{"d":null,"f":null,"h":null}"#,
                r#"{"d":-0.0,"f":-0.0,"h":-0.0}"#,
                r#"{"d":3.0,"f":3.0,"h":3.0}"#,
                r#"{"d":1e+300,"f":1e+38,"h":2048.0}"#,
            ]
        );
    }

    #[test]
    fn row_groups_and_batches_are_followed_in_order_and_bytes_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pq");
        write_parquet(&path, &[sample_batch(0, 70), sample_batch(70, 30)]);
        let size = std::fs::metadata(&path).unwrap().len();
        let batches = batches(FileSourceOptions {
            batch_rows: 25,
            ..options(dir.path(), "x.pq")
        })
        .unwrap();
        let sizes: Vec<usize> = batches.iter().map(|b| b.records.len()).collect();
        assert_eq!(sizes, vec![25, 25, 25, 25]);
        let ids: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.value["id"].as_i64().unwrap()))
            .collect();
        assert_eq!(ids, (0..100).collect::<Vec<_>>());
        assert_eq!(batches.iter().map(|b| b.bytes_read).sum::<u64>(), size);
        assert!(batches[0].bytes_read > 0 && batches[0].bytes_read < size);
    }

    #[test]
    fn parquet_is_recognised_by_its_magic_bytes_under_another_name() {
        let dir = tempfile::tempdir().unwrap();
        write_parquet(&dir.path().join("x.csv"), &[sample_batch(0, 3)]);
        let (records, _) = read_all(options(dir.path(), "x.csv")).unwrap();
        assert_eq!(records.len(), 3);
    }

    #[test]
    fn a_corrupt_parquet_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        write_parquet(&path, &[sample_batch(0, 10)]);
        let mut bytes = std::fs::read(&path).unwrap();
        let len = bytes.len();
        bytes.truncate(len - 12);
        std::fs::write(&path, &bytes).unwrap();
        let mut source = FileSource::open(options(dir.path(), "x.parquet")).unwrap();
        let error = source.next_batch().unwrap_err();
        assert!(
            matches!(error, SourceError::Parquet { ref path, .. } if path == "x.parquet"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .starts_with("cannot read Parquet file `x.parquet`: ")
        );
        assert!(!error.is_retryable());

        write(dir.path(), "junk.parquet", b"PAR1 not really parquet");
        let mut source = FileSource::open(options(dir.path(), "junk.parquet")).unwrap();
        assert!(matches!(
            source.next_batch(),
            Err(SourceError::Parquet { .. })
        ));
    }

    #[test]
    fn a_gzipped_parquet_file_is_refused_when_opening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        write_parquet(&path, &[sample_batch(0, 3)]);
        let bytes = std::fs::read(&path).unwrap();
        write(dir.path(), "x.parquet.gz", &gzip(&bytes));
        let error = FileSource::open(options(dir.path(), "x.parquet.gz")).unwrap_err();
        assert!(
            matches!(error, SourceError::UnsupportedCompression { .. }),
            "{error}"
        );
    }
}
