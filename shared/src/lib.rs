//! # skipprd core library
//!
//! Everything the `skipprd` CLI (`local/`) and the Lambda functions (`functions/`) do lives here;
//! the binaries only parse their input and wire these pieces together. See
//! `docs/architecture.md` for the module map and the I/O-edge traits.
//!
//! - [`aws`]: AWS clients from the standard configuration chain, and a request counter.
//! - [`config`]: `skippr.yml` discovery, parsing, environment substitution, validation.
//! - [`schema`]: type inference, the saved schema format, conversion of records to Arrow.
//! - [`durable`]: durable local file writes (fsynced directories, atomic whole-file writes).
//! - [`objects`]: whole objects by name in a directory or an S3 bucket (deadletter objects).
//! - [`sources`]: connectors that read records (the File source first).
//! - [`deadletter`]: records that could not be read or typed, with where they came from.
//! - [`state`]: the state store (positions, acknowledgements, lease) and its implementations.
//! - [`wal`]: the write-ahead log: durable, checksummed batches on disk.
//! - [`pipeline`]: the commands' core logic (`discover`), reporting progress through events.
//! - [`failpoint`]: the named crash-injection points of the write path, all in one place.
//! - [`query`]: SQL (DataFusion) over the batches committed in pipelines' WALs.

pub mod aws;
pub mod config;
pub mod deadletter;
pub mod doctor;
pub mod durable;
pub mod failpoint;
pub mod objects;
pub mod pipeline;
pub mod query;
pub mod schema;
pub mod sinks;
pub mod sources;
pub mod state;
mod text;
pub mod wal;
