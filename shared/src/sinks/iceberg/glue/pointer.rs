//! [`GluePointer`]: a table's current metadata is the Glue table's `metadata_location`
//! parameter (see the [module docs](super)).

use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::{Error, ErrorKind, NamespaceIdent, Result};

use super::super::catalog::{Current, Pointer, TableRef, commit_conflict};
use super::{GlueApi, GlueError, GlueTable, glue_columns};

/// Glue table parameter naming the table format.
pub const PARAM_TABLE_TYPE: &str = "table_type";
/// `table_type` value of an Iceberg table.
pub const ICEBERG: &str = "ICEBERG";
/// Glue table parameter: the current metadata file.
pub const PARAM_METADATA_LOCATION: &str = "metadata_location";
/// Glue table parameter: the metadata file before it.
pub const PARAM_PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";

/// The Glue database of a namespace (its parts joined by `_`; skipprd's namespaces have one).
pub fn database_name(namespace: &NamespaceIdent) -> String {
    namespace.iter().cloned().collect::<Vec<_>>().join("_")
}

/// The version number in a metadata file name `0000N-<uuid>.metadata.json` (`0` for a name
/// of another form, such as one written by another engine).
pub(super) fn version_of(location: &str) -> u64 {
    let name = location.rsplit('/').next().unwrap_or(location);
    name.split('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The Glue pointer (see the module docs).
#[derive(Debug, Clone)]
pub struct GluePointer {
    glue: Arc<dyn GlueApi>,
}

impl GluePointer {
    /// A pointer over `glue`.
    pub fn new(glue: Arc<dyn GlueApi>) -> Self {
        GluePointer { glue }
    }

    /// The Glue API.
    pub fn glue(&self) -> &Arc<dyn GlueApi> {
        &self.glue
    }
}

#[async_trait]
impl Pointer for GluePointer {
    async fn current(&self, table: TableRef<'_>) -> Result<Option<Current>> {
        let database = database_name(table.ident.namespace());
        let Some(glue) = self.glue.get_table(&database, table.ident.name()).await? else {
            return Ok(None);
        };
        let table_type = glue.parameters.get(PARAM_TABLE_TYPE).map(String::as_str);
        if !table_type.is_some_and(|t| t.eq_ignore_ascii_case(ICEBERG)) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "Glue table {database}.{} exists but is not an Iceberg table (table_type = {}); drop it or choose another table name",
                    glue.name,
                    table_type.unwrap_or("unset")
                ),
            ));
        }
        let Some(location) = glue.parameters.get(PARAM_METADATA_LOCATION).cloned() else {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "Glue table {database}.{} is an Iceberg table without a `metadata_location` parameter",
                    glue.name
                ),
            ));
        };
        Ok(Some(Current {
            version: version_of(&location),
            location,
            token: glue.version_id,
            properties: glue.parameters,
        }))
    }

    async fn publish(
        &self,
        file_io: &FileIO,
        table: TableRef<'_>,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> Result<String> {
        let database = database_name(table.ident.namespace());
        let next = previous.map_or(1, |c| c.version + 1);
        let location = format!(
            "{}/metadata/{next:05}-{}.metadata.json",
            table.location,
            uuid::Uuid::new_v4()
        );
        let bytes = serde_json::to_vec(metadata).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, "cannot serialize table metadata").with_source(e)
        })?;
        file_io.new_output(&location)?.write(bytes.into()).await?;

        let mut parameters = previous.map(|c| c.properties.clone()).unwrap_or_default();
        parameters.insert(PARAM_TABLE_TYPE.to_owned(), ICEBERG.to_owned());
        parameters.insert(PARAM_METADATA_LOCATION.to_owned(), location.clone());
        match previous {
            Some(c) => parameters.insert(
                PARAM_PREVIOUS_METADATA_LOCATION.to_owned(),
                c.location.clone(),
            ),
            None => parameters.remove(PARAM_PREVIOUS_METADATA_LOCATION),
        };
        let input = GlueTable {
            name: table.ident.name().to_owned(),
            location: Some(metadata.location().to_owned()),
            parameters,
            columns: glue_columns(metadata.current_schema()),
            version_id: None,
        };
        let swapped = match previous {
            None => self.glue.create_table(&database, &input).await,
            Some(_) => {
                let version_id = previous.and_then(|c| c.token.as_deref());
                self.glue.update_table(&database, &input, version_id).await
            }
        };
        let error = match swapped {
            Ok(()) => return Ok(location),
            Err(e) => e,
        };
        // A conflict, or a failure whose outcome is unknown: the table may name this commit's
        // file (the SDK retried a request whose first attempt applied, and the retry was
        // refused). Read it again before deciding.
        let conflict = matches!(error, GlueError::Conflict { .. });
        match self.current(table).await {
            Ok(Some(current)) if current.location == location => {
                tracing::info!(table = %format!("{database}.{}", table.ident.name()), version = next, "The Glue table names this commit's metadata: an earlier attempt of the swap applied.");
                return Ok(location);
            }
            // Another writer holds version `next`: a swap conditioned on the version before
            // it can never apply, so nothing names the file.
            Ok(Some(current)) if conflict && current.version == next => {
                if let Err(e) = file_io.delete(&location).await {
                    tracing::warn!(file = %location, error = %e, "Could not delete the metadata file of a lost commit; it is unreferenced.");
                }
            }
            // Unsure: keep the file, harmless if unreferenced.
            _ => {
                tracing::debug!(file = %location, "Kept the metadata file of a commit whose outcome is unclear.")
            }
        }
        if conflict {
            Err(commit_conflict(
                &format!("Glue table {database}.{}", table.ident.name()),
                next,
            ))
        } else {
            Err(error.into())
        }
    }

    async fn list_namespaces(&self, _warehouse: &str) -> Result<Vec<String>> {
        Ok(self.glue.list_databases().await?)
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent, location: &str) -> Result<()> {
        let database = database_name(namespace);
        if self.glue.database_exists(&database).await? {
            return Ok(());
        }
        if self.glue.create_database(&database, location).await? {
            tracing::info!(database = %database, location = %location, "Created the Glue database.");
        }
        Ok(())
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent, _location: &str) -> Result<bool> {
        Ok(self.glue.database_exists(&database_name(namespace)).await?)
    }

    async fn list_tables(
        &self,
        namespace: &NamespaceIdent,
        _location: &str,
    ) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .glue
            .list_tables(&database_name(namespace))
            .await?
            .into_iter()
            .filter(|t| {
                t.parameters
                    .get(PARAM_TABLE_TYPE)
                    .is_some_and(|v| v.eq_ignore_ascii_case(ICEBERG))
            })
            .map(|t| t.name)
            .collect();
        names.sort();
        Ok(names)
    }
}
