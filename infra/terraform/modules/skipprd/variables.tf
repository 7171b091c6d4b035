# Inputs of the skipprd module. docs/deploy.md explains each resource; infra/sam/template.yaml
# describes the same system with the same defaults (tests/infra/compare.py checks that).

variable "name" {
  description = "Prefix of every resource name (functions, table, buckets, rules). Lowercase letters, digits and '-'."
  type        = string
  default     = "skipprd"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,19}$", var.name))
    error_message = "name: 2-20 characters, lowercase letters, digits and '-', starting with a letter (bucket names `<name>-<account>-<region>-athena-results` must fit S3's 63)."
  }
}

variable "sync_zip" {
  description = "Path of the skipprd-sync package: target/lambda/skipprd-sync/bootstrap.zip from `cargo lambda build --release --arm64 --output-format zip`."
  type        = string
}

variable "discover_zip" {
  description = "Path of the skipprd-discover package: target/lambda/skipprd-discover/bootstrap.zip."
  type        = string
}

variable "architecture" {
  description = "CPU architecture the zips were built for: arm64 (cargo lambda --arm64) or x86_64."
  type        = string
  default     = "arm64"
  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture: arm64 or x86_64."
  }
}

variable "pipelines" {
  description = "Pipelines of skippr.yml to run on a schedule: name => EventBridge schedule expression, e.g. { bikehire = \"rate(5 minutes)\" }. One rule per entry invokes the sync function with {\"pipeline\": \"<name>\"}."
  type        = map(string)
  validation {
    condition     = alltrue([for k, v in var.pipelines : can(regex("^[A-Za-z0-9_-]{1,38}$", k)) && can(regex("^(rate|cron)\\(.+\\)$", v))])
    error_message = "pipelines: names of letters, digits, '_' and '-' (at most 38, so `<name>-sync-<pipeline>` fits EventBridge's 64), values rate(...) or cron(...)."
  }
}

variable "source_bucket" {
  description = "Name of the existing bucket the pipelines' S3 source reads (read-only access for both functions)."
  type        = string
}

variable "source_prefix" {
  description = "Key prefix the functions may read in source_bucket (\"\" for the whole bucket)."
  type        = string
  default     = ""
}

variable "config_key" {
  description = "Key of skippr.yml in the skippr bucket (upload it after the first apply); SKIPPR_CONFIG_S3_URI points at it."
  type        = string
  default     = "config/skippr.yml"
}

variable "glue_database_name" {
  description = "Glue database of the AthenaIceberg sink (the config's glue_database_name): lowercase letters, digits and '_'."
  type        = string
  default     = "skipprd_lake"
  validation {
    condition     = can(regex("^[a-z0-9_]{1,200}$", var.glue_database_name))
    error_message = "glue_database_name: lowercase letters, digits and '_'."
  }
}

variable "memory_mb" {
  description = "Memory of each function in MB (CPU grows with it)."
  type        = number
  default     = 512
}

variable "sync_timeout_seconds" {
  description = "Timeout of one sync pass. Keep it below the shortest schedule period so passes do not queue up; the pass stops reading before the deadline (SKIPPR_DEADLINE_MARGIN_SECONDS)."
  type        = number
  default     = 240
}

variable "discover_timeout_seconds" {
  description = "Timeout of one discover invocation (it reads the whole source unless limited)."
  type        = number
  default     = 900
}

variable "sync_reserved_concurrency" {
  description = "Reserved concurrency of the sync function: a cap on simultaneous passes. 0 (the default): no reservation, since an account with Lambda's starting quota of 10 concurrent executions cannot reserve any (Lambda keeps 100 unreserved); null: one per pipeline. The DynamoDB writer lease is what keeps two passes of one pipeline apart either way."
  type        = number
  default     = 0
}

variable "discover_reserved_concurrency" {
  description = "Reserved concurrency of the discover function; 0 (the default): no reservation."
  type        = number
  default     = 0
}

variable "log_retention_days" {
  description = "Retention of the functions' CloudWatch log groups."
  type        = number
  default     = 365
}

variable "noncurrent_version_days" {
  description = "Days a replaced or deleted object version is kept in the versioned buckets (skippr, WAL, warehouse) before it is expired: the window to restore a WAL batch or a schema by hand."
  type        = number
  default     = 7
}

variable "athena_results_days" {
  description = "Days Athena query results are kept."
  type        = number
  default     = 30
}

variable "alarm_actions" {
  description = "ARNs (e.g. an SNS topic) notified when the sync alarm changes state. Empty: the alarm only shows in the console."
  type        = list(string)
  default     = []
}

variable "table_deletion_protection" {
  description = "DynamoDB deletion protection on the state table (positions, leases, catalog pointers)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource that takes tags."
  type        = map(string)
  default     = {}
}
