# Names and values shared by the resources of this module.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account   = data.aws_caller_identity.current.account_id
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.region

  # The four buckets. skippr: config, schemas, deadletters. wal: the write-ahead log
  # (WAL_STORAGE=s3). warehouse: the Iceberg tables. athena_results: query results.
  # versioned: replaced and deleted objects are kept noncurrent_version_days (a WAL batch or a
  # schema can be restored by hand); expire_days: current objects expire (query results only;
  # never the WAL: without a destination the WAL is the dataset).
  buckets = {
    skippr         = { suffix = "skippr", versioned = true, expire_days = null }
    wal            = { suffix = "wal", versioned = true, expire_days = null }
    warehouse      = { suffix = "warehouse", versioned = true, expire_days = null }
    athena_results = { suffix = "athena-results", versioned = false, expire_days = var.athena_results_days }
  }

  # The Glue ARNs a database and its tables are authorised on (Glue checks all three).
  glue_catalog_arn  = "arn:${local.partition}:glue:${local.region}:${local.account}:catalog"
  glue_database_arn = "arn:${local.partition}:glue:${local.region}:${local.account}:database/${aws_glue_catalog_database.lake.name}"
  glue_tables_arn   = "arn:${local.partition}:glue:${local.region}:${local.account}:table/${aws_glue_catalog_database.lake.name}/*"
  # Written out (not the resource's arn attribute) to read the same as the SAM template.
  athena_workgroup_arn = "arn:${local.partition}:athena:${local.region}:${local.account}:workgroup/${aws_athena_workgroup.query.name}"

  # What both functions read (shared/src/serverless.rs, docs/config.md). The config refers to
  # the SKIPPR_* names below as ${NAME} (see infra/skippr.example.yml); a config may not
  # keep the WAL on disk or use the embedded store, so WAL_STORAGE=s3 and the DynamoDB table.
  environment = {
    SKIPPR_CONFIG_S3_URI         = "s3://${aws_s3_bucket.this["skippr"].id}/${var.config_key}"
    WAL_STORAGE                  = "s3"
    SKIPPR_S3_BUCKET             = aws_s3_bucket.this["skippr"].id
    SKIPPR_WAL_S3_BUCKET         = aws_s3_bucket.this["wal"].id
    SKIPPRD_EL_STORAGE_MODE      = "s3"
    SKIPPR_STATE_TABLE           = aws_dynamodb_table.state.name
    SKIPPR_WAREHOUSE             = "s3://${aws_s3_bucket.this["warehouse"].id}/iceberg"
    SKIPPR_GLUE_DATABASE         = aws_glue_catalog_database.lake.name
    SKIPPR_ATHENA_WORKGROUP      = aws_athena_workgroup.query.name
    SKIPPR_ATHENA_RESULTS_BUCKET = aws_s3_bucket.this["athena_results"].id
    SKIPPR_SOURCE_BUCKET         = var.source_bucket
    RUST_LOG                     = "info"
  }
}
