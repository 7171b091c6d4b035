//! [`MemorySink`]: a [`Sink`] whose tables are in memory, for tests of the commit protocol.
//!
//! It keeps the promises of a real exactly-once destination: each table records the last
//! batch id it holds in the same step ("commit") that adds the rows, writes skip batches at or
//! below it, the [`CommitCheck`] runs before each table commit, and the destination
//! failpoints ([`crate::failpoint::sink`]) sit where the Iceberg sink has them, so a test can
//! stop a delivery before or after a table commit. [`MemorySink::fail_next_commit`] makes a
//! table's next commit fail as an unavailable destination would.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use arrow::array::RecordBatch;

use crate::schema::PipelineSchema;
use crate::wal::{BatchId, BatchMeta};

use super::SinkError;
use super::sink::{CommitCheck, Delivered, ReadBatch, Sink};

/// One in-memory table.
#[derive(Debug, Clone, Default)]
pub struct MemoryTable {
    /// The last WAL batch id that landed.
    pub landed: u64,
    /// The rows, with the id of the WAL batch each came from, in commit order.
    pub batches: Vec<(BatchId, RecordBatch)>,
    /// Commits made.
    pub commits: u64,
}

impl MemoryTable {
    /// Rows the table holds.
    pub fn rows(&self) -> u64 {
        self.batches.iter().map(|(_, b)| b.num_rows() as u64).sum()
    }
}

/// Tables in memory, by namespace.
#[derive(Debug, Default)]
pub struct MemorySink {
    tables: Mutex<BTreeMap<String, MemoryTable>>,
    /// Tables whose next commit fails.
    failing: Mutex<Vec<String>>,
}

impl MemorySink {
    /// An empty destination.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the table of `namespace`, if it exists.
    pub fn table(&self, namespace: &str) -> Option<MemoryTable> {
        self.lock().get(namespace).cloned()
    }

    /// The namespaces that have a table.
    pub fn namespaces(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Make the next commit to the table of `namespace` fail (retryable, as a destination
    /// that is down would), before anything of it is visible.
    pub fn fail_next_commit(&self, namespace: &str) {
        self.failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(namespace.to_owned());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, MemoryTable>> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failpoint(name: &'static str) -> Result<(), SinkError> {
        if crate::failpoint::check(name) {
            return Err(SinkError::Failpoint { name });
        }
        Ok(())
    }
}

impl Sink for MemorySink {
    fn location(&self) -> String {
        "memory".to_owned()
    }

    fn prepare(&self, namespaces: &[&str], _schema: &PipelineSchema) -> Result<(), SinkError> {
        let mut tables = self.lock();
        for ns in namespaces {
            tables.entry((*ns).to_owned()).or_default();
        }
        Ok(())
    }

    fn landed(&self, namespace: &str) -> Result<u64, SinkError> {
        Ok(self.lock().get(namespace).map_or(0, |t| t.landed))
    }

    fn landed_any(&self) -> Result<u64, SinkError> {
        Ok(self.lock().values().map(|t| t.landed).max().unwrap_or(0))
    }

    fn write(
        &self,
        batches: &[BatchMeta],
        read: ReadBatch<'_>,
        schema: &PipelineSchema,
        before_commit: CommitCheck<'_>,
    ) -> Result<Delivered, SinkError> {
        let Some(last) = batches.last().map(|b| b.id) else {
            return Ok(Delivered::default());
        };
        let namespaces: Vec<&str> = {
            let mut names: Vec<&str> = batches
                .iter()
                .flat_map(|b| b.parts.iter())
                .filter(|p| p.rows > 0 && p.kind().is_data())
                .map(|p| p.namespace.as_str())
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        self.prepare(&namespaces, schema)?;
        let landed: BTreeMap<&str, u64> = namespaces
            .iter()
            .map(|ns| Ok((*ns, self.landed(ns)?)))
            .collect::<Result<_, SinkError>>()?;
        let mut delivered = Delivered::default();
        // The rows each table gets, staged until its commit.
        let mut staged: BTreeMap<&str, Vec<(BatchId, RecordBatch)>> = BTreeMap::new();
        for meta in batches {
            let wanted = meta.parts.iter().any(|p| {
                p.rows > 0
                    && landed
                        .get(p.namespace.as_str())
                        .is_some_and(|l| meta.id.0 > *l)
            });
            if !wanted {
                for p in meta
                    .parts
                    .iter()
                    .filter(|p| p.rows > 0 && landed.contains_key(p.namespace.as_str()))
                {
                    delivered.skipped_parts += 1;
                    delivered.skipped_rows += p.rows;
                }
                continue;
            }
            let parts = read(meta.id).map_err(|source| SinkError::Wal {
                batch: meta.id,
                source,
            })?;
            for part in parts {
                if part.batch.num_rows() == 0 || !part.kind().is_data() {
                    continue;
                }
                let Some((ns, table_landed)) = landed.get_key_value(part.namespace.as_str()) else {
                    continue;
                };
                if meta.id.0 <= *table_landed {
                    delivered.skipped_parts += 1;
                    delivered.skipped_rows += part.batch.num_rows() as u64;
                    continue;
                }
                staged.entry(ns).or_default().push((meta.id, part.batch));
            }
        }
        for (ns, rows) in staged {
            Self::failpoint(crate::failpoint::sink::AFTER_DATA_FILES)?;
            delivered.files += 1;
            before_commit(ns)?;
            let failing = {
                let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
                let at = failing.iter().position(|f| f == ns);
                at.map(|i| failing.remove(i))
            };
            if failing.is_some() {
                return Err(SinkError::Io {
                    path: format!("memory/{ns}").into(),
                    source: std::io::Error::other("the memory destination refused the commit"),
                });
            }
            let count: u64 = rows.iter().map(|(_, b)| b.num_rows() as u64).sum();
            {
                let mut tables = self.lock();
                let table = tables.entry(ns.to_owned()).or_default();
                table.batches.extend(rows);
                table.landed = last.0;
                table.commits += 1;
            }
            Self::failpoint(crate::failpoint::sink::AFTER_TABLE_COMMIT)?;
            delivered.commits += 1;
            delivered.rows += count;
        }
        delivered.through = Some(last);
        Ok(delivered)
    }
}
