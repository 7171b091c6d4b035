//! The tables of one pipeline's WAL: one per namespace, read batch by batch as a query scans it.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;

use arrow::datatypes::Schema;
use datafusion::catalog::TableProvider;

use super::error::{QueryError, ScanError};
use super::lake::{LakePart, LakeTable};
use super::landed::{text_batch, text_schema};
use crate::schema::adapt::{adapt_batch, merge_schemas, normalize};
use crate::wal::{BatchId, WalError, WalView};

/// One namespace of one pipeline's WAL.
pub(super) struct NamespaceTable {
    /// The namespace.
    pub(super) namespace: String,
    /// The table, ready to register.
    pub(super) table: Arc<dyn TableProvider>,
}

/// The tables of `wal`, one per namespace that appears in a committed batch or in `lakes`
/// (the landed tables of a pipeline with an Iceberg destination), sorted by name. A namespace
/// with a landed table reads it plus the WAL batches after the last one it holds; one that
/// `replaced` says is replaced by whole reads (`replace_table`, `replace_partition`) reads its
/// landed table alone, and is not listed before one landed (a read's rows are the table once
/// delivered, not beside it before).
/// Reads the schemas of the newest batch of each schema version (no rows are decoded).
pub(super) fn namespace_tables(
    pipeline: &str,
    wal: &Arc<dyn WalView>,
    mut lakes: BTreeMap<String, LakePart>,
    replaced: &dyn Fn(&str) -> bool,
) -> Result<Vec<NamespaceTable>, QueryError> {
    /// Per namespace: the batches holding rows of it, and the newest batch of each version.
    #[derive(Default)]
    struct Listing {
        batches: Vec<BatchId>,
        newest_of_version: BTreeMap<u32, BatchId>,
    }
    let mut listings: BTreeMap<&str, Listing> = BTreeMap::new();
    let lake_names: Vec<String> = lakes.keys().cloned().collect();
    for name in &lake_names {
        listings.entry(name.as_str()).or_default();
    }
    for batch in wal.batches() {
        for part in &batch.parts {
            // A read-end marker holds no rows of any table.
            if part.kind() == crate::wal::PartKind::ReadEnd {
                continue;
            }
            // A replaced table is what landed: a read waiting in the WAL is not beside it.
            if replaced(&part.namespace) {
                continue;
            }
            let landed = lakes.get(&part.namespace).map_or(0, |l| l.landed);
            if batch.id.0 <= landed {
                continue;
            }
            let listing = listings.entry(part.namespace.as_str()).or_default();
            if part.rows > 0 && listing.batches.last() != Some(&batch.id) {
                listing.batches.push(batch.id);
            }
            listing
                .newest_of_version
                .insert(part.schema_version, batch.id);
        }
    }

    let wal_error = |source: WalError| QueryError::Wal {
        pipeline: pipeline.to_owned(),
        source,
    };
    let mut schemas_of_batch: HashMap<BatchId, Vec<(String, u32, SchemaRef)>> = HashMap::new();
    let mut tables = Vec::with_capacity(listings.len());
    for (namespace, listing) in listings {
        let mut newest_first: Vec<(BatchId, u32)> = listing
            .newest_of_version
            .iter()
            .map(|(&version, &id)| (id, version))
            .collect();
        newest_first.sort_unstable_by(|a, b| b.cmp(a));
        let mut schemas = Vec::with_capacity(newest_first.len());
        for (id, version) in newest_first {
            let parts = match schemas_of_batch.entry(id) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => entry.insert(wal.read_schemas(id).map_err(wal_error)?),
            };
            schemas.extend(
                parts
                    .iter()
                    .filter(|(name, v, _)| name == namespace && *v == version)
                    .map(|(_, _, schema)| schema.clone()),
            );
        }
        let lake = lakes.remove(namespace);
        // A CSV destination's table holds nested values as text: so do the WAL's rows.
        let text = lake.as_ref().is_some_and(LakePart::is_text);
        if text {
            schemas = schemas.iter().map(|s| text_schema(s)).collect();
        }
        if let Some(lake) = &lake {
            schemas.insert(
                0,
                Arc::new(Schema::new(
                    lake.schema
                        .fields()
                        .iter()
                        .map(|f| normalize(f))
                        .collect::<Vec<_>>(),
                )),
            );
        }
        let schema = merge_schemas(&schemas);
        let partition = WalPartition {
            pipeline: pipeline.to_owned(),
            namespace: namespace.to_owned(),
            wal: Arc::clone(wal),
            batches: Arc::from(listing.batches),
            schema: schema.clone(),
            text,
        };
        let wal_table: Arc<dyn TableProvider> = Arc::new(
            StreamingTable::try_new(schema.clone(), vec![Arc::new(partition)])
                .map_err(|error| QueryError::from_datafusion(error, &[]))?,
        );
        let table = match lake {
            Some(lake) => Arc::new(LakeTable {
                lake: lake
                    .provider(schema.clone())
                    .map_err(|error| QueryError::from_datafusion(error, &[]))?,
                schema,
                wal: wal_table,
            }),
            None => wal_table,
        };
        tables.push(NamespaceTable {
            namespace: namespace.to_owned(),
            table,
        });
    }
    Ok(tables)
}

/// A namespace's rows in WAL order: each batch is read, decoded and converted to the table
/// schema only when the query asks for it, so memory stays bounded by one WAL batch.
struct WalPartition {
    pipeline: String,
    namespace: String,
    wal: Arc<dyn WalView>,
    batches: Arc<[BatchId]>,
    schema: SchemaRef,
    /// Nested values as text (see [`text_batch`]).
    text: bool,
}

impl fmt::Debug for WalPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WalPartition")
            .field("pipeline", &self.pipeline)
            .field("namespace", &self.namespace)
            .field("batches", &self.batches.len())
            .finish()
    }
}

impl PartitionStream for WalPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let pipeline = self.pipeline.clone();
        let namespace = self.namespace.clone();
        let wal = Arc::clone(&self.wal);
        let schema = self.schema.clone();
        let batches = Arc::clone(&self.batches);
        let text = self.text;
        let rows = (0..batches.len()).flat_map(move |index| {
            let id = batches[index];
            let parts = match wal.read(id) {
                Ok(parts) => parts,
                Err(source) => {
                    let error = ScanError {
                        pipeline: pipeline.clone(),
                        source,
                    };
                    return vec![Err(DataFusionError::External(Box::new(error)))];
                }
            };
            parts
                .into_iter()
                .filter(|part| part.namespace == namespace && part.batch.num_rows() > 0)
                .map(|part| {
                    let batch = if text {
                        text_batch(&part.batch)?
                    } else {
                        part.batch
                    };
                    adapt_batch(&batch, &schema).map_err(DataFusionError::from)
                })
                .collect()
        });
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(rows),
        ))
    }
}
