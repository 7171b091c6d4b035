output "sync_function_name" {
  description = "The sync function (scheduled; invoke by hand with {\"pipeline\": \"<name>\"})."
  value       = aws_lambda_function.sync.function_name
}

output "discover_function_name" {
  description = "The discover function: aws lambda invoke --function-name <this> --payload '{\"pipeline\": \"<name>\"}'."
  value       = aws_lambda_function.discover.function_name
}

output "config_s3_uri" {
  description = "Upload skippr.yml here (aws s3 cp skippr.yml <this>)."
  value       = local.environment.SKIPPR_CONFIG_S3_URI
}

output "buckets" {
  description = "The bucket names: skippr, wal, warehouse, athena_results."
  value       = { for k, b in aws_s3_bucket.this : k => b.id }
}

output "state_table_name" {
  description = "The DynamoDB state table."
  value       = aws_dynamodb_table.state.name
}

output "glue_database_name" {
  description = "The Glue database of the Iceberg tables."
  value       = aws_glue_catalog_database.lake.name
}

output "athena_workgroup_name" {
  description = "The Athena workgroup for queries."
  value       = aws_athena_workgroup.query.name
}

output "query_policy_arn" {
  description = "Managed policy to attach to the people or roles that query the tables with Athena."
  value       = aws_iam_policy.query.arn
}

output "failure_queue_url" {
  description = "Failed scheduled passes (on-failure destination and rule dead letters)."
  value       = aws_sqs_queue.failures.id
}

output "log_groups" {
  description = "The functions' log groups."
  value       = { sync = aws_cloudwatch_log_group.sync.name, discover = aws_cloudwatch_log_group.discover.name }
}
