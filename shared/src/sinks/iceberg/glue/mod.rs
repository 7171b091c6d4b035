//! The `AthenaIceberg` catalog: Iceberg tables registered in AWS Glue, so Athena (and
//! PyIceberg's `GlueCatalog`, Spark, Trino...) finds them.
//!
//! A table's current metadata is the Glue table's `metadata_location` parameter, the
//! convention every Glue-aware Iceberg engine follows ([`GluePointer`], `pointer.rs`):
//!
//! - **current**: `GetTable`; the table must have `table_type=ICEBERG`. The `VersionId` Glue
//!   returns is kept with the version read ([`Current::token`]), and so are the table's
//!   parameters ([`Current::properties`]).
//! - **publish**: the new metadata is written to
//!   `{table}/metadata/{next:05}-{uuid}.metadata.json` first, then `CreateTable` (the first
//!   version) or `UpdateTable` with the `VersionId` read: Glue's optimistic lock is the
//!   compare-and-swap. The table input carries `table_type=ICEBERG`, `metadata_location`,
//!   `previous_metadata_location`, the table's other parameters as read, and the Glue
//!   columns derived from the current Iceberg schema (`schema.rs`: [`glue_columns`], so
//!   Athena's column list follows schema evolution).
//! - **conflict**: `ConcurrentModificationException` on update (or `AlreadyExistsException`
//!   on create) usually means another writer won, but it is also what the SDK's retry of a
//!   request whose first attempt applied (then timed out, got a 5xx or lost its connection)
//!   gets back. So the table is read again: if its `metadata_location` is this commit's file,
//!   the commit succeeded. Otherwise a retryable `CatalogCommitConflicts` makes iceberg's
//!   `Transaction` reload the table and apply the append again on top of the winner's
//!   version; the sink's landed check ([`super::check_not_landed`], run by the catalog on the
//!   version the swap is conditioned on) refuses a commit of batches the winner already
//!   landed. The metadata file just written is deleted only when the winner holds version
//!   `N+1` itself (a swap conditioned on `N` can never apply then); otherwise it is kept.
//! - **unknown outcome** (a timeout, a 5xx after the SDK's retries): the table is read again
//!   the same way (naming this commit's file: success); otherwise the error is returned and
//!   the metadata file kept. A file the table may name is never deleted: an unreferenced one
//!   is harmless, a deleted current one makes the table unreadable.
//!
//! Glue is reached through [`GlueApi`] (`api.rs`): [`SdkGlue`] (`sdk.rs`) is the real service;
//! [`MemoryGlue`] (`memory.rs`) is an in-process double that enforces `VersionId`, which the
//! local AWS server (moto 5.2.5) does NOT do (it accepts an `UpdateTable` with a stale
//! `VersionId`), so the race tests run against the double.
//!
//! [`Current::token`]: super::catalog::Current::token
//! [`Current::properties`]: super::catalog::Current::properties

mod api;
mod memory;
mod pointer;
mod schema;
mod sdk;

#[cfg(test)]
mod tests;

pub use api::{GlueApi, GlueColumn, GlueError, GlueResult, GlueTable};
pub use memory::MemoryGlue;
pub use pointer::{
    GluePointer, ICEBERG, PARAM_METADATA_LOCATION, PARAM_PREVIOUS_METADATA_LOCATION,
    PARAM_TABLE_TYPE, database_name,
};
pub use schema::{glue_columns, hive_type};
pub use sdk::SdkGlue;
