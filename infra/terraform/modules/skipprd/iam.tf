# Least-privilege roles, one per function. Each statement names the calls it serves (derived
# from shared/src: the AWS SDK calls each function makes); every resource is one this module
# creates, or the source bucket. infra/sam/template.yaml has the same statements under the
# same Sids (tests/infra/compare.py checks that), and docs/deploy.md explains each one.

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

locals {
  source_objects_arn = "arn:${local.partition}:s3:::${var.source_bucket}/${var.source_prefix}*"
  source_bucket_arn  = "arn:${local.partition}:s3:::${var.source_bucket}"
}

resource "aws_iam_role" "sync" {
  name               = local.sync_name
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = var.tags
}

resource "aws_iam_role" "discover" {
  name               = local.discover_name
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "sync" {
  # Its own log group (the group exists, so no logs:CreateLogGroup).
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.sync.arn}:*"]
  }
  # SKIPPR_CONFIG_S3_URI, read once per execution environment.
  statement {
    sid       = "ReadConfig"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.this["skippr"].arn}/${var.config_key}"]
  }
  # The saved schema (load, then save when it evolves): schemas/{tenant}/{workspace}/{pipeline}/schema.json.
  statement {
    sid       = "Schemas"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.this["skippr"].arn}/schemas/*"]
  }
  # The S3 deadletter sink of infra/skippr.example.yml: one object per batch with rejected records.
  statement {
    sid       = "Deadletters"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.this["skippr"].arn}/deadletters/*"]
  }
  # ListObjectsV2 (WAL recovery, warehouse listing) and, by S3's rules, a 404 instead of a 403
  # for a missing key (a schema not saved yet, a WAL marker, a table file).
  statement {
    sid       = "ListOwnBuckets"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this["skippr"].arn, aws_s3_bucket.this["wal"].arn, aws_s3_bucket.this["warehouse"].arn]
  }
  # The WAL: PUT body and marker (If-None-Match), GET on recovery and delivery, DeleteObjects on reclaim.
  statement {
    sid       = "Wal"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.this["wal"].arn}/wal/*"]
  }
  # Iceberg data and metadata files: HEAD/GET/PUT (multipart for large files, aborted on failure), DeleteObjects.
  statement {
    sid       = "Warehouse"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.this["warehouse"].arn}/*"]
  }
  # The source, read-only: ListObjectsV2 and GetObject.
  statement {
    sid       = "SourceList"
    actions   = ["s3:ListBucket"]
    resources = [local.source_bucket_arn]
  }
  statement {
    sid       = "SourceRead"
    actions   = ["s3:GetObject"]
    resources = [local.source_objects_arn]
  }
  # The state store: DescribeTable on open, GetItem/Query reads, conditional UpdateItem/DeleteItem
  # writes, and fenced writes (TransactWriteItems = ConditionCheckItem + UpdateItem/DeleteItem).
  statement {
    sid = "StateTable"
    actions = [
      "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem",
      "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
    ]
    resources = [aws_dynamodb_table.state.arn]
  }
  # The AthenaIceberg sink: find the database, create and swap (compare-and-swap on VersionId) table versions.
  statement {
    sid       = "GlueTables"
    actions   = ["glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"]
    resources = [local.glue_catalog_arn, local.glue_database_arn, local.glue_tables_arn]
  }
  # The on-failure destination: Lambda sends failed events with the function's role.
  statement {
    sid       = "FailureDestination"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.failures.arn]
  }
}

data "aws_iam_policy_document" "discover" {
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.discover.arn}:*"]
  }
  statement {
    sid       = "ReadConfig"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.this["skippr"].arn}/${var.config_key}"]
  }
  # Discover writes the schema (and reads the previous one).
  statement {
    sid       = "Schemas"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.this["skippr"].arn}/schemas/*"]
  }
  statement {
    sid       = "ListOwnBuckets"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this["skippr"].arn]
  }
  statement {
    sid       = "SourceList"
    actions   = ["s3:ListBucket"]
    resources = [local.source_bucket_arn]
  }
  statement {
    sid       = "SourceRead"
    actions   = ["s3:GetObject"]
    resources = [local.source_objects_arn]
  }
  # Discover takes the pipeline's writer lease (a lease item, conditional UpdateItem) so it never
  # rewrites the schema under a running sync.
  statement {
    sid       = "StateTable"
    actions   = ["dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.state.arn]
  }
}

resource "aws_iam_role_policy" "sync" {
  name   = "skipprd-sync"
  role   = aws_iam_role.sync.id
  policy = data.aws_iam_policy_document.sync.json
}

resource "aws_iam_role_policy" "discover" {
  name   = "skipprd-discover"
  role   = aws_iam_role.discover.id
  policy = data.aws_iam_policy_document.discover.json
}

# For people (or CI) who query the landed tables with Athena, e.g. `skipprd query --engine
# athena`: attach it to their role or group. The functions never query.
data "aws_iam_policy_document" "query" {
  statement {
    sid       = "AthenaQueries"
    actions   = ["athena:StartQueryExecution", "athena:GetQueryExecution", "athena:GetQueryResults", "athena:StopQueryExecution"]
    resources = [local.athena_workgroup_arn]
  }
  statement {
    sid       = "GlueRead"
    actions   = ["glue:GetDatabase", "glue:GetTable", "glue:GetTables"]
    resources = [local.glue_catalog_arn, local.glue_database_arn, local.glue_tables_arn]
  }
  statement {
    sid       = "WarehouseRead"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.this["warehouse"].arn}/*"]
  }
  statement {
    sid       = "ResultsObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.this["athena_results"].arn}/*"]
  }
  statement {
    sid       = "ListBuckets"
    actions   = ["s3:ListBucket", "s3:GetBucketLocation"]
    resources = [aws_s3_bucket.this["warehouse"].arn, aws_s3_bucket.this["athena_results"].arn]
  }
}

resource "aws_iam_policy" "query" {
  name        = "${var.name}-query"
  description = "Query the skipprd tables with Athena (workgroup ${aws_athena_workgroup.query.name})"
  policy      = data.aws_iam_policy_document.query.json
  tags        = var.tags
}
