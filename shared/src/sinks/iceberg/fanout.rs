//! Writing a partitioned table with bounded open writers and bounded memory.
//!
//! iceberg-rust's `FanoutWriter` keeps one open data file per partition until the delivery
//! ends: a column with 100,000 distinct values opens 100,000 files (EMFILE) and buffers a
//! row group in each (out of memory). [`BoundedFanout`] keeps at most
//! [`WriterLimits::max_open`] partition writers open and at most
//! [`WriterLimits::max_buffered_bytes`] of input in them: past either bound it closes a
//! writer (the least recently used one for a new partition; the one holding the most for
//! memory), which finishes its data file, and rows of that partition that come later go to
//! a new file. More partitions than the bound thus cost more (smaller) files, never more
//! memory or file handles; compaction merges the small files afterwards.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use iceberg::spec::{DataFile, PartitionKey, Struct};
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};

/// The bounds of [`BoundedFanout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterLimits {
    /// The most partition writers (open data files) at once. Each holds a file handle and a
    /// 1 MiB write buffer besides its row group.
    pub max_open: usize,
    /// The most input bytes (Arrow memory of the rows written) held by open writers together
    /// before the largest is closed.
    pub max_buffered_bytes: usize,
}

impl WriterLimits {
    /// The default: 32 open writers.
    pub const DEFAULT_MAX_OPEN: usize = 32;
    /// The default: 128 MiB of rows in open writers.
    pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 128 << 20;
}

impl Default for WriterLimits {
    fn default() -> Self {
        WriterLimits {
            max_open: Self::DEFAULT_MAX_OPEN,
            max_buffered_bytes: Self::DEFAULT_MAX_BUFFERED_BYTES,
        }
    }
}

/// One open partition writer.
struct Slot<W> {
    writer: W,
    /// Input bytes written to it since it opened.
    bytes: usize,
    /// When it was last written (a counter), for least-recently-used closing.
    used: u64,
}

/// A partitioned writer with bounded open files and memory (see the module docs).
pub struct BoundedFanout<B: IcebergWriterBuilder> {
    builder: B,
    limits: WriterLimits,
    open: HashMap<Struct, Slot<B::R>>,
    closed: Vec<DataFile>,
    buffered: usize,
    clock: u64,
    peak_open: usize,
}

impl<B: IcebergWriterBuilder> BoundedFanout<B> {
    /// A writer building each partition's writer with `builder`.
    pub fn new(builder: B, limits: WriterLimits) -> Self {
        BoundedFanout {
            builder,
            limits: WriterLimits {
                max_open: limits.max_open.max(1),
                max_buffered_bytes: limits.max_buffered_bytes.max(1),
            },
            open: HashMap::new(),
            closed: Vec::new(),
            buffered: 0,
            clock: 0,
            peak_open: 0,
        }
    }

    /// The most writers that were open at once.
    pub fn peak_open(&self) -> usize {
        self.peak_open
    }

    /// Write `rows` of the partition `key`.
    pub async fn write(&mut self, key: PartitionKey, rows: RecordBatch) -> iceberg::Result<()> {
        self.clock += 1;
        if !self.open.contains_key(key.data()) {
            while self.open.len() >= self.limits.max_open {
                let oldest = self
                    .open
                    .iter()
                    .min_by_key(|(_, slot)| slot.used)
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => self.close_one(&k).await?,
                    None => break,
                }
            }
            let writer = self.builder.build(Some(key.clone())).await?;
            self.open.insert(
                key.data().clone(),
                Slot {
                    writer,
                    bytes: 0,
                    used: self.clock,
                },
            );
            self.peak_open = self.peak_open.max(self.open.len());
        }
        let size = rows.get_array_memory_size();
        let Some(slot) = self.open.get_mut(key.data()) else {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "the partition writer just opened is missing",
            ));
        };
        slot.writer.write(rows).await?;
        slot.bytes += size;
        slot.used = self.clock;
        self.buffered += size;
        while self.buffered > self.limits.max_buffered_bytes {
            let largest = self
                .open
                .iter()
                .max_by_key(|(_, slot)| slot.bytes)
                .map(|(k, _)| k.clone());
            match largest {
                Some(k) => self.close_one(&k).await?,
                None => break,
            }
        }
        Ok(())
    }

    async fn close_one(&mut self, key: &Struct) -> iceberg::Result<()> {
        if let Some(mut slot) = self.open.remove(key) {
            self.buffered = self.buffered.saturating_sub(slot.bytes);
            self.closed.extend(slot.writer.close().await?);
        }
        Ok(())
    }

    /// Close every writer; the data files written, in no particular order.
    pub async fn close(mut self) -> iceberg::Result<Vec<DataFile>> {
        for (_, mut slot) in self.open.drain() {
            self.closed.extend(slot.writer.close().await?);
        }
        Ok(self.closed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use arrow::array::Int32Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use iceberg::spec::{
        Literal, NestedField, PartitionSpec, PrimitiveType, Schema as IcebergSchema, Transform,
        Type,
    };

    use super::*;

    /// Counts the writers open now and the rows written.
    #[derive(Clone, Default)]
    struct Counting {
        open: Arc<AtomicUsize>,
        peak: Arc<AtomicUsize>,
        rows: Arc<AtomicUsize>,
        files: Arc<AtomicUsize>,
    }

    struct CountingWriter(Counting);

    #[async_trait::async_trait]
    impl IcebergWriterBuilder for Counting {
        type R = CountingWriter;
        async fn build(&self, _key: Option<PartitionKey>) -> iceberg::Result<CountingWriter> {
            let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            Ok(CountingWriter(self.clone()))
        }
    }

    #[async_trait::async_trait]
    impl IcebergWriter for CountingWriter {
        async fn write(&mut self, input: RecordBatch) -> iceberg::Result<()> {
            self.0.rows.fetch_add(input.num_rows(), Ordering::SeqCst);
            Ok(())
        }
        async fn close(&mut self) -> iceberg::Result<Vec<DataFile>> {
            self.0.open.fetch_sub(1, Ordering::SeqCst);
            self.0.files.fetch_add(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
    }

    fn key(spec: &PartitionSpec, schema: &Arc<IcebergSchema>, value: i32) -> PartitionKey {
        PartitionKey::new(
            spec.clone(),
            Arc::clone(schema),
            Struct::from_iter([Some(Literal::int(value))]),
        )
    }

    fn rows(n: usize) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, true)])),
            vec![Arc::new(Int32Array::from_iter_values(0..n as i32))],
        )
        .unwrap()
    }

    fn setup() -> (PartitionSpec, Arc<IcebergSchema>) {
        let schema = Arc::new(
            IcebergSchema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "v", Type::Primitive(PrimitiveType::Int)).into(),
                ])
                .build()
                .unwrap(),
        );
        let spec = PartitionSpec::builder(Arc::clone(&schema))
            .add_partition_field("v", "v", Transform::Identity)
            .unwrap()
            .build()
            .unwrap();
        (spec, schema)
    }

    /// 10,000 distinct partitions, 3 rounds: never more than 8 writers open, every row
    /// written, every writer closed. iceberg-rust's `FanoutWriter` would hold 10,000 open.
    #[test]
    fn high_cardinality_never_opens_more_writers_than_the_bound() {
        let (spec, schema) = setup();
        let counting = Counting::default();
        let limits = WriterLimits {
            max_open: 8,
            max_buffered_bytes: usize::MAX,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut fanout = BoundedFanout::new(counting.clone(), limits);
            for round in 0..3 {
                for value in 0..10_000 {
                    fanout
                        .write(key(&spec, &schema, value), rows(1 + round))
                        .await
                        .unwrap();
                }
            }
            assert_eq!(fanout.peak_open(), 8);
            fanout.close().await.unwrap();
        });
        assert_eq!(counting.peak.load(Ordering::SeqCst), 8);
        assert_eq!(
            counting.open.load(Ordering::SeqCst),
            0,
            "every writer closed"
        );
        assert_eq!(counting.rows.load(Ordering::SeqCst), 10_000 * (1 + 2 + 3));
    }

    /// The memory cap closes the writer holding the most rows: with a cap of about two
    /// batches, a few partitions written in turn keep under it.
    #[test]
    fn the_memory_cap_closes_the_largest_writer() {
        let (spec, schema) = setup();
        let counting = Counting::default();
        let one = rows(1000).get_array_memory_size();
        let limits = WriterLimits {
            max_open: 100,
            max_buffered_bytes: one * 2,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut fanout = BoundedFanout::new(counting.clone(), limits);
            for i in 0..20 {
                fanout
                    .write(key(&spec, &schema, i % 4), rows(1000))
                    .await
                    .unwrap();
                assert!(fanout.buffered <= one * 2, "{}", fanout.buffered);
            }
            fanout.close().await.unwrap();
        });
        assert_eq!(counting.rows.load(Ordering::SeqCst), 20_000);
        assert!(counting.files.load(Ordering::SeqCst) >= 10);
        assert!(counting.peak.load(Ordering::SeqCst) <= 3);
    }
}
