//! [`SdkGlue`]: the [`GlueApi`] over the AWS SDK. Every failed request is read in one place,
//! [`Call::outcome`]: the error code Glue sent says whether it is an answer (a database or
//! table that does not exist, or already does), a conflict, a missing database, or a failure;
//! a failure keeps the SDK's classification ([`SdkFailure::from_sdk`]), including whether it
//! is retryable.

use async_trait::async_trait;
use aws_sdk_glue::error::SdkError;

use super::{GlueApi, GlueColumn, GlueError, GlueResult, GlueTable};
use crate::aws::{Aws, HasStatus, SdkFailure};

/// Glue's error code for a database or table that does not exist.
const NOT_FOUND: &str = "EntityNotFoundException";
/// Glue's error code for a database or table that already exists.
const ALREADY_EXISTS: &str = "AlreadyExistsException";
/// Glue's error code for an update whose `VersionId` is no longer the table's.
const CONCURRENT_MODIFICATION: &str = "ConcurrentModificationException";

/// What an error code means to one request (see [`Call::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Means {
    /// An answer, not a failure: the request's outcome is `None` (the database or table does
    /// not exist, or already does).
    Answer,
    /// Another writer changed the table first: [`GlueError::Conflict`].
    Conflict,
    /// The database does not exist: [`GlueError::NoDatabase`].
    NoDatabase,
}

/// One Glue request, as its errors name it.
#[derive(Debug, Clone)]
pub(super) struct Call {
    /// The operation (`GetTable`, ...).
    pub(super) operation: &'static str,
    /// The database (or, for `GetDatabases`, `the catalog`).
    pub(super) database: String,
    /// The table, for table requests.
    pub(super) table: Option<String>,
    /// The error codes that mean something to this request; any other code is a failure.
    pub(super) codes: &'static [(&'static str, Means)],
}

impl Call {
    fn new(
        operation: &'static str,
        database: &str,
        codes: &'static [(&'static str, Means)],
    ) -> Self {
        Call {
            operation,
            database: database.to_owned(),
            table: None,
            codes,
        }
    }

    fn on_table(mut self, table: &str) -> Self {
        self.table = Some(table.to_owned());
        self
    }

    /// The database or `database.table`.
    fn target(&self) -> String {
        match &self.table {
            Some(table) => format!("{}.{table}", self.database),
            None => self.database.clone(),
        }
    }

    /// The one reading of a request's result: `Some` output on success; `None` when Glue
    /// answered with the code this request takes as an answer ([`Means::Answer`]); otherwise
    /// the error the code means to this request, or [`GlueError::Sdk`] with the SDK's
    /// classification of the failure. That classification decides retrying: throttling, a 5xx,
    /// a timeout or a transport error is retryable, anything else (`AccessDeniedException`, a
    /// validation error) is not; `From<GlueError> for iceberg::Error` carries it on as the
    /// iceberg error's retryable flag.
    pub(super) fn outcome<T, E, R>(
        &self,
        result: Result<T, SdkError<E, R>>,
    ) -> GlueResult<Option<T>>
    where
        E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + HasStatus,
    {
        let error = match result {
            Ok(output) => return Ok(Some(output)),
            Err(error) => error,
        };
        let failure = SdkFailure::from_sdk(&error);
        let means = self
            .codes
            .iter()
            .find(|(code, _)| *code == failure.code)
            .map(|(_, means)| *means);
        match means {
            Some(Means::Answer) => Ok(None),
            Some(Means::Conflict) => Err(GlueError::Conflict {
                database: self.database.clone(),
                table: self.table.clone().unwrap_or_default(),
                message: failure.message,
            }),
            Some(Means::NoDatabase) => Err(GlueError::NoDatabase {
                database: self.database.clone(),
            }),
            None => Err(GlueError::Sdk {
                operation: self.operation,
                target: self.target(),
                failure,
            }),
        }
    }
}

/// [`GlueApi`] over the AWS SDK.
#[derive(Clone)]
pub struct SdkGlue {
    aws: Aws,
    client: aws_sdk_glue::Client,
    catalog_id: Option<String>,
}

impl std::fmt::Debug for SdkGlue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SdkGlue")
            .field("aws", &self.aws)
            .field("catalog_id", &self.catalog_id)
            .finish()
    }
}

impl SdkGlue {
    /// The `UpdateTable` request for `input`, guarded by `version_id`. It sets `SkipArchive`:
    /// without it Glue keeps every replaced version of the table, and a table stops taking
    /// commits at 100,000 versions (1,000,000 an account: `ResourceNumberLimitExceeded`),
    /// about a year at one commit per table every five minutes. Iceberg's own metadata keeps
    /// the history, as Iceberg's Glue catalog does by default.
    fn update_table_request(
        &self,
        database: &str,
        input: aws_sdk_glue::types::TableInput,
        version_id: Option<&str>,
    ) -> aws_sdk_glue::operation::update_table::builders::UpdateTableFluentBuilder {
        self.client
            .update_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input)
            .set_version_id(version_id.map(str::to_owned))
            .skip_archive(true)
    }

    /// Glue of `aws`'s region, in the catalog `catalog_id` (default: the caller's account).
    pub fn new(aws: &Aws, catalog_id: Option<String>) -> Self {
        SdkGlue {
            aws: aws.clone(),
            client: aws.glue(),
            catalog_id,
        }
    }
}

fn from_sdk_table(t: &aws_sdk_glue::types::Table) -> GlueTable {
    let sd = t.storage_descriptor();
    GlueTable {
        name: t.name().to_owned(),
        location: sd.and_then(|sd| sd.location()).map(str::to_owned),
        parameters: t
            .parameters()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        columns: sd
            .map(|sd| {
                sd.columns()
                    .iter()
                    .map(|c| GlueColumn {
                        name: c.name().to_owned(),
                        type_name: c.r#type().unwrap_or_default().to_owned(),
                        comment: c.comment().map(str::to_owned),
                        parameters: c
                            .parameters()
                            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        version_id: t.version_id().map(str::to_owned),
    }
}

fn to_table_input(
    table: &GlueTable,
    operation: &'static str,
    target: &str,
) -> GlueResult<aws_sdk_glue::types::TableInput> {
    use aws_sdk_glue::types::{Column, StorageDescriptor, TableInput};
    let build = |e: aws_sdk_glue::error::BuildError| GlueError::Build {
        operation,
        target: target.to_owned(),
        message: e.to_string(),
    };
    let mut columns = Vec::with_capacity(table.columns.len());
    for c in &table.columns {
        columns.push(
            Column::builder()
                .name(&c.name)
                .r#type(&c.type_name)
                .set_comment(c.comment.clone())
                .set_parameters(Some(c.parameters.clone().into_iter().collect()))
                .build()
                .map_err(build)?,
        );
    }
    TableInput::builder()
        .name(&table.name)
        .table_type("EXTERNAL_TABLE")
        .set_parameters(Some(table.parameters.clone().into_iter().collect()))
        .storage_descriptor(
            StorageDescriptor::builder()
                .set_location(table.location.clone())
                .set_columns(Some(columns))
                .build(),
        )
        .build()
        .map_err(build)
}

#[async_trait]
impl GlueApi for SdkGlue {
    async fn database_exists(&self, database: &str) -> GlueResult<bool> {
        let request = self
            .client
            .get_database()
            .set_catalog_id(self.catalog_id.clone())
            .name(database);
        let call = Call::new("GetDatabase", database, &[(NOT_FOUND, Means::Answer)]);
        self.aws
            .run(async move { Ok(call.outcome(request.send().await)?.is_some()) })
            .await?
    }

    async fn create_database(&self, database: &str, location: &str) -> GlueResult<bool> {
        let input = aws_sdk_glue::types::DatabaseInput::builder()
            .name(database)
            .location_uri(location)
            .description("Iceberg tables written by skipprd")
            .build()
            .map_err(|e| GlueError::Build {
                operation: "CreateDatabase",
                target: database.to_owned(),
                message: e.to_string(),
            })?;
        let request = self
            .client
            .create_database()
            .set_catalog_id(self.catalog_id.clone())
            .database_input(input);
        let call = Call::new(
            "CreateDatabase",
            database,
            &[(ALREADY_EXISTS, Means::Answer)],
        );
        self.aws
            .run(async move { Ok(call.outcome(request.send().await)?.is_some()) })
            .await?
    }

    async fn list_databases(&self) -> GlueResult<Vec<String>> {
        let request = self
            .client
            .get_databases()
            .set_catalog_id(self.catalog_id.clone());
        let call = Call::new("GetDatabases", "the catalog", &[]);
        self.aws
            .run(async move {
                let mut names = Vec::new();
                let mut pages = request.into_paginator().send();
                while let Some(page) = pages.next().await {
                    // No error code is an answer to `GetDatabases`: `None` does not happen.
                    let Some(page) = call.outcome(page)? else {
                        break;
                    };
                    names.extend(page.database_list().iter().map(|d| d.name().to_owned()));
                }
                Ok(names)
            })
            .await?
    }

    async fn get_table(&self, database: &str, table: &str) -> GlueResult<Option<GlueTable>> {
        let request = self
            .client
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .name(table);
        let call = Call::new("GetTable", database, &[(NOT_FOUND, Means::Answer)]).on_table(table);
        self.aws
            .run(async move {
                Ok(call
                    .outcome(request.send().await)?
                    .and_then(|out| out.table().map(from_sdk_table)))
            })
            .await?
    }

    async fn list_tables(&self, database: &str) -> GlueResult<Vec<GlueTable>> {
        let request = self
            .client
            .get_tables()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database);
        let call = Call::new("GetTables", database, &[(NOT_FOUND, Means::Answer)]);
        self.aws
            .run(async move {
                let mut tables = Vec::new();
                let mut pages = request.into_paginator().send();
                while let Some(page) = pages.next().await {
                    // No such database: no tables.
                    let Some(page) = call.outcome(page)? else {
                        return Ok(Vec::new());
                    };
                    tables.extend(page.table_list().iter().map(from_sdk_table));
                }
                Ok(tables)
            })
            .await?
    }

    async fn create_table(&self, database: &str, table: &GlueTable) -> GlueResult<()> {
        let call = Call::new(
            "CreateTable",
            database,
            &[
                (ALREADY_EXISTS, Means::Conflict),
                (NOT_FOUND, Means::NoDatabase),
            ],
        )
        .on_table(&table.name);
        let input = to_table_input(table, call.operation, &call.target())?;
        let request = self
            .client
            .create_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input);
        self.aws
            .run(async move { call.outcome(request.send().await).map(|_| ()) })
            .await?
    }

    async fn update_table(
        &self,
        database: &str,
        table: &GlueTable,
        version_id: Option<&str>,
    ) -> GlueResult<()> {
        let call = Call::new(
            "UpdateTable",
            database,
            &[(CONCURRENT_MODIFICATION, Means::Conflict)],
        )
        .on_table(&table.name);
        let input = to_table_input(table, call.operation, &call.target())?;
        let request = self.update_table_request(database, input, version_id);
        self.aws
            .run(async move { call.outcome(request.send().await).map(|_| ()) })
            .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_table_skips_the_archive_so_a_table_never_runs_out_of_versions() {
        let aws = Aws::load(Some("us-east-1")).unwrap();
        let glue = SdkGlue::new(&aws, None);
        let input = aws_sdk_glue::types::TableInput::builder()
            .name("t")
            .build()
            .unwrap();
        let request = glue.update_table_request("db", input, Some("7"));
        assert_eq!(request.get_skip_archive(), &Some(true));
        assert_eq!(request.get_version_id().as_deref(), Some("7"));
    }
}
