# An example root: one pipeline, bikehire, synced every 5 minutes from an existing source
# bucket. Copy this folder, set the variables (terraform.tfvars), then
#   terraform init && terraform validate && terraform plan && terraform apply
# and upload the config: aws s3 cp skippr.yml "$(terraform output -raw config_s3_uri)".
# docs/deploy.md walks through it.

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "us-east-1"
}

variable "source_bucket" {
  description = "The existing bucket the bikehire pipeline reads."
  type        = string
}

variable "lambda_dir" {
  description = "Where cargo lambda wrote the zips: $CARGO_TARGET_DIR/lambda (default target/lambda of the repository)."
  type        = string
  default     = "../../../target/lambda"
}

module "skipprd" {
  source        = "../modules/skipprd"
  name          = "skipprd"
  sync_zip      = "${var.lambda_dir}/skipprd-sync/bootstrap.zip"
  discover_zip  = "${var.lambda_dir}/skipprd-discover/bootstrap.zip"
  architecture  = "arm64"
  source_bucket = var.source_bucket
  source_prefix = "bikehire/"
  pipelines = {
    bikehire = "rate(5 minutes)"
  }
}

output "sync_function_name" {
  value = module.skipprd.sync_function_name
}

output "discover_function_name" {
  value = module.skipprd.discover_function_name
}

output "config_s3_uri" {
  value = module.skipprd.config_s3_uri
}

output "buckets" {
  value = module.skipprd.buckets
}

output "query_policy_arn" {
  value = module.skipprd.query_policy_arn
}

output "failure_queue_url" {
  value = module.skipprd.failure_queue_url
}
