//! `store create`: make the state store's DynamoDB table exist, on request only.
//!
//! `sync` and `discover` never create the table: a missing table fails naming it and this
//! command. The table holds every pipeline of every workspace and tenant that names it.

use crate::config::ConfigError;
use crate::config::validate::{Settings, StoreKind};
use crate::state::StateError;
use crate::state::dynamodb::{TableCreation, create_table};

use super::{Event, Observer, PipelineError};

/// Create the DynamoDB table of `store.type: dynamodb` (on-demand capacity, keys `pk`/`sk`)
/// and wait until it is active; an existing table with the right keys is left as it is.
/// Reports [`Event::StoreReady`].
pub fn create_store(settings: &Settings, observer: &mut dyn Observer) -> Result<(), PipelineError> {
    let table = match &settings.store {
        StoreKind::Dynamodb { table } => table,
        StoreKind::Embedded => {
            return Err(ConfigError::UnsupportedSetting {
                setting: "skippr.store.type".into(),
                value: "sled".into(),
                note: Some(
                    "`store create` creates the table of `store.type: dynamodb`; the embedded store needs nothing created".into(),
                ),
            }
            .into());
        }
    };
    let aws =
        crate::aws::Aws::load(None).map_err(|e| PipelineError::Store(StateError::AwsSetup(e)))?;
    let creation = create_table(&aws, table).map_err(PipelineError::Store)?;
    observer.event(&Event::StoreReady {
        table: table.clone(),
        region: aws.region().unwrap_or("unknown").to_owned(),
        created: creation == TableCreation::Created,
    });
    Ok(())
}
