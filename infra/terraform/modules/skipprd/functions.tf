# The two functions, their logs, the schedules and what happens when a pass fails.

locals {
  sync_name     = "${var.name}-sync"
  discover_name = "${var.name}-discover"
  # 0 means "no reservation" here (Lambda's own -1); null: one concurrent pass per pipeline.
  sync_concurrency = var.sync_reserved_concurrency == null ? length(var.pipelines) : var.sync_reserved_concurrency
}

resource "aws_cloudwatch_log_group" "sync" {
  # checkov:skip=CKV_AWS_158:CloudWatch Logs encrypts log data by default; the lines hold no secrets (the config's secrets never reach logs), and a KMS key would need a key policy for the logs service.
  name              = "/aws/lambda/${local.sync_name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_cloudwatch_log_group" "discover" {
  # checkov:skip=CKV_AWS_158:As for the sync log group: default encryption, no secrets in the lines.
  name              = "/aws/lambda/${local.discover_name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_lambda_function" "sync" {
  # checkov:skip=CKV_AWS_117:No VPC: the function only calls AWS APIs (S3, DynamoDB, Glue); a VPC would need NAT or endpoints for each, at a monthly cost, and protects nothing here.
  # checkov:skip=CKV_AWS_116:Failed asynchronous invocations go to the on-failure destination (aws_lambda_function_event_invoke_config.sync), which supersedes a function DLQ.
  # checkov:skip=CKV_AWS_173:The environment holds resource names only (no secrets), so the default encryption at rest is enough.
  # checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile the deployer owns; the zip comes from the deployer's own build.
  # checkov:skip=CKV_AWS_50:No X-Ray: the functions emit no trace segments, and their JSON summary (seconds, aws_requests) is the timing record.
  function_name                  = local.sync_name
  description                    = "skipprd: one sync pass of the pipeline named in the event"
  role                           = aws_iam_role.sync.arn
  runtime                        = "provided.al2023"
  handler                        = "bootstrap"
  architectures                  = [var.architecture]
  filename                       = var.sync_zip
  source_code_hash               = filebase64sha256(var.sync_zip)
  memory_size                    = var.memory_mb
  timeout                        = var.sync_timeout_seconds
  reserved_concurrent_executions = local.sync_concurrency == 0 ? -1 : local.sync_concurrency
  environment {
    variables = local.environment
  }
  tags       = var.tags
  depends_on = [aws_cloudwatch_log_group.sync, aws_iam_role_policy.sync]
}

resource "aws_lambda_function" "discover" {
  # checkov:skip=CKV_AWS_117:No VPC, as for the sync function.
  # checkov:skip=CKV_AWS_116:Discover is invoked synchronously by hand; the caller sees the error.
  # checkov:skip=CKV_AWS_173:The environment holds resource names only (no secrets).
  # checkov:skip=CKV_AWS_272:Code signing needs an AWS Signer profile the deployer owns.
  # checkov:skip=CKV_AWS_50:No X-Ray: the functions emit no trace segments.
  function_name                  = local.discover_name
  description                    = "skipprd: infer and save the schema of the pipeline named in the event"
  role                           = aws_iam_role.discover.arn
  runtime                        = "provided.al2023"
  handler                        = "bootstrap"
  architectures                  = [var.architecture]
  filename                       = var.discover_zip
  source_code_hash               = filebase64sha256(var.discover_zip)
  memory_size                    = var.memory_mb
  timeout                        = var.discover_timeout_seconds
  reserved_concurrent_executions = var.discover_reserved_concurrency == 0 ? -1 : var.discover_reserved_concurrency
  environment {
    variables = local.environment
  }
  tags       = var.tags
  depends_on = [aws_cloudwatch_log_group.discover, aws_iam_role_policy.discover]
}

# Failed scheduled passes, kept 14 days for inspection: Lambda's on-failure destination (the
# pass failed) and the rules' dead-letter queue (EventBridge could not invoke the function).
resource "aws_sqs_queue" "failures" {
  name                      = "${var.name}-failures"
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

data "aws_iam_policy_document" "failures" {
  statement {
    sid       = "EventBridgeDeadLetters"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.failures.arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:events:${local.region}:${local.account}:rule/${local.sync_name}-*"]
    }
  }
}

resource "aws_sqs_queue_policy" "failures" {
  queue_url = aws_sqs_queue.failures.id
  policy    = data.aws_iam_policy_document.failures.json
}

# No Lambda retries: the next scheduled pass is the retry (it resumes from the last committed
# batch), and an event older than 15 minutes (throttled behind the reserved concurrency) is
# dropped to the failure queue rather than run late.
resource "aws_lambda_function_event_invoke_config" "sync" {
  function_name                = aws_lambda_function.sync.function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 900
  destination_config {
    on_failure {
      destination = aws_sqs_queue.failures.arn
    }
  }
}

# One rule per pipeline, its input the event the function expects.
resource "aws_cloudwatch_event_rule" "schedule" {
  for_each            = var.pipelines
  name                = "${local.sync_name}-${each.key}"
  description         = "skipprd: sync pipeline ${each.key}"
  schedule_expression = each.value
  state               = "ENABLED"
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "schedule" {
  for_each = var.pipelines
  rule     = aws_cloudwatch_event_rule.schedule[each.key].name
  arn      = aws_lambda_function.sync.arn
  input    = jsonencode({ pipeline = each.key })
  retry_policy {
    maximum_retry_attempts       = 2
    maximum_event_age_in_seconds = 900
  }
  dead_letter_config {
    arn = aws_sqs_queue.failures.arn
  }
}

resource "aws_lambda_permission" "schedule" {
  for_each      = var.pipelines
  statement_id  = "schedule-${each.key}"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.sync.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.schedule[each.key].arn
}

# Passes failing three 5-minute periods in a row (a single retryable failure is not worth a
# page: the next pass retries it).
resource "aws_cloudwatch_metric_alarm" "sync_errors" {
  alarm_name          = "${local.sync_name}-errors"
  alarm_description   = "skipprd sync passes have failed for 15 minutes; see the log group ${aws_cloudwatch_log_group.sync.name} (errorType Retryable.* / NonRetryable.*) and the queue ${aws_sqs_queue.failures.name}."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.sync.function_name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}
