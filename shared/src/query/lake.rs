//! A namespace table of a pipeline with an Iceberg destination: the landed Iceberg table
//! unioned with the WAL batches that have not landed in it yet.
//!
//! "Landed" is decided by the table itself: its snapshot summaries and properties record the
//! highest WAL batch id of the pipeline it holds (see [`crate::sinks::iceberg`]). WAL batches
//! up to that id are left out, the rest are read from the WAL, so a row is counted once even
//! between the Iceberg commit and the acknowledgement that lets the WAL reclaim it. The WAL
//! is listed before the table is loaded, so the table is never older than the WAL listing:
//! a batch that lands while the query opens is read from the table, not missed.
//!
//! The landed side is DataFusion's own Parquet scan over the table's live data files (listed
//! from the current snapshot's manifests), with the merged table schema: projection and
//! filters go down into it (row groups pruned by their statistics), columns are matched by
//! name, and columns or struct fields a file lacks read as null. skipprd renames a column in
//! one case only (a key `a.b` beside a struct `a`, undotted to `a%2Eb` by the sink): a table
//! with such a column is read by the [`FileReader`], which finds its values under the key in
//! files written before the rename. iceberg-rust 0.10's own reader cannot yet read a file written before a struct gained
//! a field, which is why it is not used here. Filters are also applied above the union, since
//! the WAL side reads every row.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::union::UnionExec;

use super::landed::{FileReader, FilesTable};

/// The landed table of a namespace, as the query sees it.
pub(super) struct LakePart {
    /// The highest WAL batch id of the pipeline the table holds.
    pub(super) landed: u64,
    /// The table's Arrow schema (with Iceberg field ids).
    pub(super) schema: SchemaRef,
    /// The live data files of the current snapshot (`file://` URIs).
    pub(super) files: Vec<String>,
    /// How the files are read: `None` for DataFusion's Parquet scan (Iceberg tables, and
    /// `File`/`S3` Parquet, whose files carry the schema's own names), else a
    /// [`FileReader`] (an `Athena` sink's Parquet, JSON lines, CSV).
    pub(super) reader: Option<Arc<FileReader>>,
}

impl fmt::Debug for LakePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LakePart")
            .field("landed", &self.landed)
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl LakePart {
    /// Whether the files hold nested values as text (CSV).
    pub(super) fn is_text(&self) -> bool {
        self.reader
            .as_ref()
            .is_some_and(|r| r.format == crate::config::connectors::OutputFormat::Csv)
    }

    /// A scan of the data files with `schema` (the merged table schema).
    pub(super) fn provider(&self, schema: SchemaRef) -> DfResult<Arc<dyn TableProvider>> {
        if self.files.is_empty() {
            return Ok(Arc::new(EmptyTable::new(schema)));
        }
        if let Some(reader) = &self.reader {
            return Ok(Arc::new(FilesTable {
                schema,
                files: self.files.clone().into(),
                reader: Arc::clone(reader),
            }));
        }
        let urls = self
            .files
            .iter()
            // The URL parser percent-decodes the path, and data file paths hold literal
            // `%` escapes (partition directories, see `schema::naming`): escape the `%`
            // itself so the file is found under its real name.
            .map(|file| ListingTableUrl::parse(file.replace('%', "%25")))
            .collect::<DfResult<Vec<_>>>()?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .with_schema(schema);
        Ok(Arc::new(ListingTable::try_new(config)?))
    }
}

/// The union of a landed table and the WAL rows not in it.
#[derive(Debug)]
pub(super) struct LakeTable {
    /// The table schema: the landed table's and the WAL's merged, without metadata.
    pub(super) schema: SchemaRef,
    /// The landed rows, with `schema`.
    pub(super) lake: Arc<dyn TableProvider>,
    /// The WAL rows not landed, with `schema`.
    pub(super) wal: Arc<dyn TableProvider>,
}

#[async_trait]
impl TableProvider for LakeTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let lake = self.lake.scan(state, projection, filters, limit).await?;
        let wal = self.wal.scan(state, projection, &[], limit).await?;
        UnionExec::try_new(vec![lake, wal])
    }
}
