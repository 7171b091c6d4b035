//! Hive type names, metadata version numbers, the Glue double's `VersionId`, the SDK error
//! reading, and the pointer conformance suite on the double and on moto.

use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};

use super::pointer::version_of;
use super::sdk::{Call, Means};
use super::*;
use crate::aws::testing::{bucket, moto};
use crate::sinks::iceberg::catalog::LakePointer;
use crate::sinks::iceberg::catalog::conformance::{Place, run};
use crate::sinks::iceberg::s3::s3_file_io;
use crate::sinks::iceberg::storage::durable_file_io;

#[test]
fn iceberg_types_have_their_hive_names() {
    let p = |t| Type::Primitive(t);
    assert_eq!(hive_type(&p(PrimitiveType::Long)), "bigint");
    assert_eq!(hive_type(&p(PrimitiveType::Int)), "int");
    assert_eq!(hive_type(&p(PrimitiveType::Timestamptz)), "timestamp");
    assert_eq!(
        hive_type(&p(PrimitiveType::Decimal {
            precision: 38,
            scale: 9
        })),
        "decimal(38,9)"
    );
    let nested = Type::Struct(StructType::new(vec![
        NestedField::optional(1, "a", p(PrimitiveType::Int)).into(),
        NestedField::optional(
            2,
            "tags",
            Type::List(ListType::new(
                NestedField::list_element(3, p(PrimitiveType::String), false).into(),
            )),
        )
        .into(),
        NestedField::optional(
            4,
            "m",
            Type::Map(MapType::new(
                NestedField::map_key_element(5, p(PrimitiveType::String)).into(),
                NestedField::map_value_element(6, p(PrimitiveType::Double), false).into(),
            )),
        )
        .into(),
    ]));
    assert_eq!(
        hive_type(&nested),
        "struct<a:int,tags:array<string>,m:map<string,double>>"
    );
}

#[test]
fn hostile_keys_give_valid_glue_columns_and_parseable_type_strings() {
    let p = |t| Type::Primitive(t);
    let long = "k".repeat(300);
    let schema = iceberg::spec::Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "new\nline", p(PrimitiveType::Int)).into(),
            NestedField::optional(2, long.as_str(), p(PrimitiveType::Int)).into(),
            NestedField::optional(
                3,
                "s",
                Type::Struct(StructType::new(vec![
                    NestedField::optional(4, "a:b,c<d> e", p(PrimitiveType::Int)).into(),
                ])),
            )
            .into(),
        ])
        .build()
        .unwrap();
    let columns = glue_columns(&schema);
    // Athena's rules: lowercase letters, digits and `_`; a changed key is the comment.
    assert!(
        columns[0].name.starts_with("new_line_"),
        "{}",
        columns[0].name
    );
    assert_eq!(columns[0].comment.as_deref(), Some("new\nline"));
    assert!(columns[1].name.len() <= 255, "{}", columns[1].name.len());
    assert_eq!(columns[2].name, "s");
    assert_eq!(columns[2].comment, None);
    let field = columns[2]
        .type_name
        .strip_prefix("struct<")
        .and_then(|t| t.strip_suffix(":int>"))
        .unwrap();
    assert!(field.starts_with("a_b_c_d__e_"), "{field}");
    for column in &columns {
        assert!(
            column
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{}",
            column.name
        );
    }
}

#[test]
fn version_numbers_come_from_metadata_names() {
    assert_eq!(
        version_of("s3://b/t/metadata/00007-abc-def.metadata.json"),
        7
    );
    assert_eq!(version_of("s3://b/t/metadata/v3.metadata.json"), 0);
}

#[test]
fn the_double_enforces_version_ids() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let glue = MemoryGlue::new();
    rt.block_on(async {
        glue.create_database("db", "s3://b/db").await?;
        let t = GlueTable {
            name: "t".into(),
            ..GlueTable::default()
        };
        glue.create_table("db", &t).await?;
        assert!(matches!(
            glue.create_table("db", &t).await,
            Err(GlueError::Conflict { .. })
        ));
        let v1 = glue.get_table("db", "t").await?.and_then(|t| t.version_id);
        glue.update_table("db", &t, v1.as_deref()).await?;
        assert!(matches!(
            glue.update_table("db", &t, v1.as_deref()).await,
            Err(GlueError::Conflict { .. })
        ));
        Ok::<_, GlueError>(())
    })?;
    assert_eq!(glue.conflicts(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The SDK error helper: one reading of every failed request, retryability kept
// ---------------------------------------------------------------------------------------------

/// A failed `GetTable`, as the SDK returns it.
type GetTableFailure = aws_sdk_glue::error::SdkError<
    aws_sdk_glue::operation::get_table::GetTableError,
    aws_smithy_runtime_api::http::Response,
>;

/// A `GetTable` failure as the SDK reports a service error: `code` with HTTP `status`.
fn service_error(code: &str, status: u16) -> GetTableFailure {
    let meta = aws_smithy_types::error::ErrorMetadata::builder()
        .code(code)
        .message(format!("{code} from the test"))
        .build();
    let raw = aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(status).unwrap(),
        aws_smithy_types::body::SdkBody::empty(),
    );
    aws_sdk_glue::error::SdkError::service_error(
        aws_sdk_glue::operation::get_table::GetTableError::generic(meta),
        raw,
    )
}

fn get_table_call() -> Call {
    Call {
        operation: "GetTable",
        database: "db".to_owned(),
        table: Some("t".to_owned()),
        codes: &[
            ("EntityNotFoundException", Means::Answer),
            ("ConcurrentModificationException", Means::Conflict),
            ("NoSuchDatabase", Means::NoDatabase),
        ],
    }
}

/// The iceberg error a failed call becomes, as the catalog returns it.
fn iceberg_error(code: &str, status: u16) -> iceberg::Error {
    let failed = get_table_call().outcome::<(), _, _>(Err(service_error(code, status)));
    failed.unwrap_err().into()
}

#[test]
fn an_sdk_failure_keeps_the_sdk_retryability_into_the_iceberg_error() {
    // Refused for good: not retryable.
    for (code, status) in [
        ("AccessDeniedException", 400),
        ("InvalidInputException", 400),
    ] {
        let error = iceberg_error(code, status);
        assert!(!error.retryable(), "{code}: {error}");
        assert_eq!(error.kind(), iceberg::ErrorKind::Unexpected, "{code}");
        assert!(error.to_string().contains(code), "{error}");
        assert!(error.to_string().contains("GetTable of db.t"), "{error}");
    }
    // Throttled or a service fault: retryable.
    for (code, status) in [
        ("ThrottlingException", 400),
        ("InternalServiceException", 500),
        ("ServiceUnavailable", 503),
    ] {
        let error = iceberg_error(code, status);
        assert!(error.retryable(), "{code}: {error}");
    }
}

#[test]
fn error_codes_mean_what_the_call_says() {
    let call = get_table_call();
    let success: Result<u8, GetTableFailure> = Ok(7);
    assert_eq!(call.outcome(success).unwrap(), Some(7), "success");
    assert_eq!(
        call.outcome::<u8, _, _>(Err(service_error("EntityNotFoundException", 400)))
            .unwrap(),
        None,
        "an answer"
    );
    let conflict = call
        .outcome::<u8, _, _>(Err(service_error("ConcurrentModificationException", 400)))
        .unwrap_err();
    assert!(
        matches!(&conflict, GlueError::Conflict { database, table, .. } if database == "db" && table == "t"),
        "{conflict}"
    );
    assert!(conflict.is_retryable());
    let conflict: iceberg::Error = conflict.into();
    assert_eq!(conflict.kind(), iceberg::ErrorKind::CatalogCommitConflicts);
    assert!(conflict.retryable());
    let missing = call
        .outcome::<u8, _, _>(Err(service_error("NoSuchDatabase", 400)))
        .unwrap_err();
    assert!(
        matches!(&missing, GlueError::NoDatabase { database } if database == "db"),
        "{missing}"
    );
    assert!(!missing.is_retryable());
    let other = call
        .outcome::<u8, _, _>(Err(service_error("AccessDeniedException", 400)))
        .unwrap_err();
    assert!(
        matches!(&other, GlueError::Sdk { operation: "GetTable", failure, .. } if failure.code == "AccessDeniedException" && !failure.retryable),
        "{other}"
    );
}

// ---------------------------------------------------------------------------------------------
// The pointer conformance suite
// ---------------------------------------------------------------------------------------------

/// The Glue pointer over the double, its tables in a local warehouse (the pointer writes
/// metadata through whatever file I/O the catalog has).
#[test]
fn the_glue_pointer_on_the_double_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let api: Arc<dyn GlueApi> = Arc::new(MemoryGlue::new());
    run(Place {
        pointer: LakePointer::new(GluePointer::new(api)),
        warehouse: format!("file://{}", dir.path().join("warehouse").display()),
        file_io: durable_file_io(),
        prefix: "conf_".to_owned(),
        refuses_stale_swaps: true,
    });
}

/// The Glue pointer over the SDK on moto, its tables in a fresh bucket and its databases
/// named uniquely (moto's Glue is shared by every test of the session).
#[test]
fn the_glue_pointer_on_moto_passes_the_conformance_suite() {
    let aws = moto();
    let api: Arc<dyn GlueApi> = Arc::new(SdkGlue::new(&aws, None));
    run(Place {
        pointer: LakePointer::new(GluePointer::new(api)),
        warehouse: format!("s3://{}/lake", bucket(&aws, "glue-conf")),
        file_io: s3_file_io(&aws, None),
        prefix: format!("conf_{}_", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        // moto 5.2.5 accepts an `UpdateTable` whose `VersionId` is stale, so the stale-swap
        // scenario would see the loser win; real Glue refuses it, and the double (above)
        // proves the pointer handles the refusal.
        refuses_stale_swaps: false,
    });
}

/// A Glue that applies every `CreateTable` and `UpdateTable` and then answers as the SDK's
/// retry of it would: refused (`AlreadyExistsException`, or `ConcurrentModificationException`
/// on the `VersionId` the first attempt made stale).
#[derive(Debug)]
struct AppliesThenRefuses(MemoryGlue);

#[async_trait::async_trait]
impl GlueApi for AppliesThenRefuses {
    async fn database_exists(&self, database: &str) -> GlueResult<bool> {
        self.0.database_exists(database).await
    }
    async fn create_database(&self, database: &str, location: &str) -> GlueResult<bool> {
        self.0.create_database(database, location).await
    }
    async fn list_databases(&self) -> GlueResult<Vec<String>> {
        self.0.list_databases().await
    }
    async fn get_table(&self, database: &str, table: &str) -> GlueResult<Option<GlueTable>> {
        self.0.get_table(database, table).await
    }
    async fn list_tables(&self, database: &str) -> GlueResult<Vec<GlueTable>> {
        self.0.list_tables(database).await
    }
    async fn create_table(&self, database: &str, table: &GlueTable) -> GlueResult<()> {
        self.0.create_table(database, table).await?;
        self.0.create_table(database, table).await
    }
    async fn update_table(
        &self,
        database: &str,
        table: &GlueTable,
        version_id: Option<&str>,
    ) -> GlueResult<()> {
        self.0.update_table(database, table, version_id).await?;
        self.0.update_table(database, table, version_id).await
    }
}

#[test]
fn the_glue_pointer_takes_a_refused_retry_of_an_applied_swap_as_success() {
    let dir = tempfile::tempdir().unwrap();
    let api: Arc<dyn GlueApi> = Arc::new(AppliesThenRefuses(MemoryGlue::new()));
    crate::sinks::iceberg::catalog::conformance::ambiguous_swaps_succeed(Place {
        pointer: LakePointer::new(GluePointer::new(api)),
        warehouse: format!("file://{}", dir.path().join("warehouse").display()),
        file_io: durable_file_io(),
        prefix: "amb_".to_owned(),
        refuses_stale_swaps: true,
    });
}
