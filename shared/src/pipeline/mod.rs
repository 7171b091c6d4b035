//! The commands' core logic, shared by the CLI and the Lambda functions.
//!
//! Each command takes a validated pipeline and an [`events::Observer`] that receives
//! [`events::Event`]s as the work goes on; the binaries decide how to show them (a progress
//! bar, text lines, or one JSON object per line).

pub mod discover;
pub mod error;
pub mod events;
pub mod source;
pub mod sync;

pub use discover::{DiscoverOptions, DiscoverReport, discover};
pub use error::PipelineError;
pub use events::{Event, Observer};
