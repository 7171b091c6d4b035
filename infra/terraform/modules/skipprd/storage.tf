# State: the buckets, the DynamoDB table, the Glue database and the Athena workgroup.

resource "aws_s3_bucket" "this" {
  for_each = local.buckets
  # checkov:skip=CKV_AWS_18:Server access logging needs a further log bucket per deployment; audit object access with CloudTrail data events if required (docs/deploy.md).
  # checkov:skip=CKV_AWS_144:Cross-region replication doubles storage and requests; the WAL and tables are rebuilt from the source, and versioning covers accidental deletes.
  # checkov:skip=CKV_AWS_145:SSE-S3 (AES256) encryption at rest, no KMS key: a customer key costs a monthly fee plus a request per object and needs kms:* grants on both roles (docs/deploy.md says how to switch).
  # checkov:skip=CKV2_AWS_62:Nothing consumes S3 event notifications; the functions run on a schedule.
  # checkov:skip=CKV_AWS_21:skippr, wal and warehouse ARE versioned (aws_s3_bucket_versioning.this; checkov does not follow its filtered for_each, tests/infra/compare.py checks it); athena-results is not: its query results are disposable and expire.
  bucket        = "${var.name}-${local.account}-${local.region}-${each.value.suffix}"
  force_destroy = false
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.this[each.key].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  for_each                = local.buckets
  bucket                  = aws_s3_bucket.this[each.key].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.this[each.key].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "this" {
  for_each = { for k, v in local.buckets : k => v if v.versioned }
  bucket   = aws_s3_bucket.this[each.key].id
  versioning_configuration {
    status = "Enabled"
  }
}

# Garbage: uploads a crashed writer left unfinished, object versions replaced or deleted (the
# WAL deletes every batch once the destination acknowledged it), and old query results.
resource "aws_s3_bucket_lifecycle_configuration" "this" {
  for_each = local.buckets
  bucket   = aws_s3_bucket.this[each.key].id
  rule {
    id     = "garbage"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }
    expiration {
      days                         = each.value.expire_days
      expired_object_delete_marker = each.value.expire_days == null ? true : null
    }
  }
  depends_on = [aws_s3_bucket_versioning.this]
}

data "aws_iam_policy_document" "tls_only" {
  for_each = local.buckets
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this[each.key].arn, "${aws_s3_bucket.this[each.key].arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  for_each   = local.buckets
  bucket     = aws_s3_bucket.this[each.key].id
  policy     = data.aws_iam_policy_document.tls_only[each.key].json
  depends_on = [aws_s3_bucket_public_access_block.this]
}

# The state store: positions, acknowledgements, the writer lease, catalog pointers. Keys as
# `skipprd store create` makes them (shared/src/state/dynamodb.rs): pk (S) HASH, sk (S) RANGE.
resource "aws_dynamodb_table" "state" {
  # checkov:skip=CKV_AWS_119:Encrypted at rest with the AWS owned key (DynamoDB's default); a customer managed key adds a monthly fee and kms grants for both roles.
  name                        = "${var.name}-state"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = var.table_deletion_protection
  attribute {
    name = "pk"
    type = "S"
  }
  attribute {
    name = "sk"
    type = "S"
  }
  point_in_time_recovery {
    enabled = true
  }
  tags = var.tags
}

# The AthenaIceberg sink registers its tables here (it creates the database only when missing,
# so the functions are not granted glue:CreateDatabase).
resource "aws_glue_catalog_database" "lake" {
  name         = var.glue_database_name
  description  = "Iceberg tables written by ${var.name} (AthenaIceberg sink)"
  location_uri = "s3://${aws_s3_bucket.this["warehouse"].id}/iceberg/${var.glue_database_name}"
}

# For people and `skipprd query --engine athena`; the functions never query.
resource "aws_athena_workgroup" "query" {
  name  = "${var.name}-query"
  state = "ENABLED"
  configuration {
    enforce_workgroup_configuration    = true
    publish_cloudwatch_metrics_enabled = true
    result_configuration {
      output_location = "s3://${aws_s3_bucket.this["athena_results"].id}/skipprd-query-results/"
      encryption_configuration {
        encryption_option = "SSE_S3"
      }
    }
  }
  force_destroy = false
  tags          = var.tags
}
