"""Check that the Terraform module and the SAM template describe the same system.

Both sides are parsed (python-hcl2 for infra/terraform, cfn-lint's loader for
infra/sam/template.yaml) and evaluated into one model each: the names, settings and
permissions of every resource, with the variables/parameters at their defaults (for
Terraform: the module's defaults overridden by the example root's arguments) and the account,
region and partition left as {account}, {region}, {partition}. ARNs are computed from the
names, so a bucket named differently on one side shows up in every statement that grants it.
The two models must be equal; the differences are printed as paths.

Further checks: the DynamoDB keys are the ones `skipprd store create` makes
(shared/src/state/dynamodb.rs); every ${NAME} in infra/skippr.example.yml is set on both
functions; no Allow statement grants a `*` resource or action.

    python compare.py            # compare; exit 1 on any difference
    python compare.py --self-test # also prove that breaking either side is caught
"""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import sys
from typing import Any

import hcl2
from cfnlint.decode import decode

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TF_MODULE = os.path.join(ROOT, "infra", "terraform", "modules", "skipprd")
TF_EXAMPLE = os.path.join(ROOT, "infra", "terraform", "example", "main.tf")
SAM_TEMPLATE = os.path.join(ROOT, "infra", "sam", "template.yaml")
EXAMPLE_CONFIG = os.path.join(ROOT, "infra", "skippr.example.yml")
DYNAMODB_RS = os.path.join(ROOT, "shared", "src", "state", "dynamodb.rs")

# Allow statements may name `*` as a resource only for the services that cannot scope the
# action to a resource. None is needed today: every action the functions and the query policy
# use supports resource-level permissions. An entry would read
#   "xray:PutTraceSegments": "X-Ray has no resource-level permissions",
STAR_RESOURCE_ALLOWED: dict[str, str] = {}


def arn(service: str, resource: str, regional: bool = True) -> str:
    where = "{region}:{account}" if regional else ":{account}"
    return f"arn:{{partition}}:{service}:{where}:{resource}"


# What a reference to a resource yields, per kind: the name is evaluated from the resource.
ATTRS = {
    "bucket": {"name": "{n}", "arn": "arn:{{partition}}:s3:::{n}"},
    "table": {"name": "{n}", "arn": arn("dynamodb", "table/{n}")},
    "queue": {
        "name": "{n}",
        "arn": arn("sqs", "{n}"),
        "url": "https://sqs.{{region}}.amazonaws.com/{{account}}/{n}",
    },
    "log_group": {"name": "{n}", "arn": arn("logs", "log-group:{n}")},
    "function": {"name": "{n}", "arn": arn("lambda", "function:{n}")},
    "role": {"name": "{n}", "arn": "arn:{{partition}}:iam::{{account}}:role/{n}"},
    "glue_database": {"name": "{n}"},
    "workgroup": {"name": "{n}"},
    "rule": {"name": "{n}", "arn": arn("events", "rule/{n}")},
    "managed_policy": {"name": "{n}", "arn": "arn:{{partition}}:iam::{{account}}:policy/{n}"},
}


def attr(kind: str, what: str, name: str) -> str:
    template = ATTRS[kind][what]
    return template.replace("{n}", name).replace("{{", "{").replace("}}", "}")


def snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


# --------------------------------------------------------------------------- Terraform

TF_KINDS = {
    "aws_s3_bucket": ("bucket", "bucket"),
    "aws_dynamodb_table": ("table", "name"),
    "aws_sqs_queue": ("queue", "name"),
    "aws_cloudwatch_log_group": ("log_group", "name"),
    "aws_lambda_function": ("function", "function_name"),
    "aws_iam_role": ("role", "name"),
    "aws_glue_catalog_database": ("glue_database", "name"),
    "aws_athena_workgroup": ("workgroup", "name"),
    "aws_cloudwatch_event_rule": ("rule", "name"),
    "aws_iam_policy": ("managed_policy", "name"),
}
# Terraform attribute -> the model's attribute, per kind.
TF_ATTR = {"id": "name", "bucket": "name", "name": "name", "function_name": "name", "arn": "arn"}


def unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


def strip_meta(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            unquote(k): strip_meta(v)
            for k, v in value.items()
            if k not in ("__is_block__", "__comments__")
        }
    if isinstance(value, list):
        return [strip_meta(v) for v in value]
    return value


class Terraform:
    """The module plus the example root's arguments, evaluated."""

    def __init__(self, files: dict[str, Any], example: Any) -> None:
        self.resources: dict[str, dict[str, Any]] = {}
        self.data: dict[str, dict[str, Any]] = {}
        self.locals: dict[str, Any] = {}
        self.vars: dict[str, Any] = {}
        self.validations: dict[str, str] = {}
        for doc in files.values():
            doc = strip_meta(doc)
            for block in doc.get("resource", []):
                for rtype, named in block.items():
                    self.resources.setdefault(rtype, {}).update(named)
            for block in doc.get("data", []):
                for dtype, named in block.items():
                    self.data.setdefault(dtype, {}).update(named)
            for block in doc.get("locals", []):
                self.locals.update(block)
            for block in doc.get("variable", []):
                for name, body in block.items():
                    self.vars[name] = unquote(body["default"]) if "default" in body else "{param.%s}" % name
                    self.validations[name] = json.dumps(body.get("validation", []))
        module = strip_meta(example)["module"][0]["skipprd"]
        for key, value in module.items():
            if key in ("source",):
                continue
            value = unquote(value)
            if isinstance(value, dict):
                value = {k: unquote(v) for k, v in value.items()}
            m = re.fullmatch(r"\$\{var\.(\w+)\}", value) if isinstance(value, str) else None
            self.vars[key] = "{param.%s}" % m.group(1) if m else value

    # Evaluation of expressions -------------------------------------------------------------

    def ev(self, value: Any, each: tuple[str, Any] | None = None) -> Any:
        value = unquote(value)
        if isinstance(value, dict):
            return {k: self.ev(v, each) for k, v in value.items()}
        if isinstance(value, list):
            return [self.ev(v, each) for v in value]
        if not isinstance(value, str):
            return value
        whole = re.fullmatch(r"\$\{(.*)\}", value, re.S)
        if whole and "${" not in whole.group(1):
            return self.expr(whole.group(1).strip(), each)
        return re.sub(r"\$\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", lambda m: str(self.expr(m.group(1).strip(), each)), value)

    def expr(self, e: str, each: tuple[str, Any] | None) -> Any:
        simple = {
            "data.aws_caller_identity.current.account_id": "{account}",
            "data.aws_partition.current.partition": "{partition}",
            "data.aws_region.current.region": "{region}",
        }
        if e in simple:
            return simple[e]
        m = re.fullmatch(r"(.+?) (==|!=) (\S+) \? (\S+) : (\S+)", e)
        if m:
            lhs, op, rhs, yes, no = m.groups()
            equal = self.operand(lhs, each) == self.operand(rhs, each)
            return self.operand(yes if equal == (op == "==") else no, each)
        m = re.fullmatch(r"length\((.+)\)", e)
        if m:
            return len(self.expr(m.group(1), each))
        if e.startswith("var."):
            return self.vars[e[4:]]
        if e.startswith("local."):
            return self.ev(self.locals[e[6:]], each)
        if each is not None and e == "each.key":
            return each[0]
        if each is not None and e.startswith("each.value."):
            return self.ev(each[1][e[len("each.value."):]], each)
        if each is not None and e == "each.value":
            return self.ev(each[1], each)
        m = re.fullmatch(r"jsonencode\(\{\s*(\w+)\s*=\s*([\w.]+)\s*\}\)", e)
        if m:
            return json.dumps({m.group(1): self.expr(m.group(2), each)}, sort_keys=True)
        m = re.fullmatch(r'(\w+)\.(\w+)(?:\[(each\.key)\]|\["([\w-]+)"\])?\.(\w+)', e)
        if m and m.group(1) in TF_KINDS:
            rtype, rname, each_key, key, attribute = m.groups()
            if each_key:
                key = each[0]
            kind, name_attr = TF_KINDS[rtype]
            name = self.resource_name(rtype, rname, key)
            return attr(kind, TF_ATTR.get(attribute, attribute), name)
        return "<expr %s>" % e

    def operand(self, e: str, each: tuple[str, Any] | None) -> Any:
        literals = {"null": None, "true": True, "false": False}
        if e in literals:
            return literals[e]
        if re.fullmatch(r"-?\d+", e):
            return int(e)
        return self.expr(e, each)

    def instances(self, rtype: str, rname: str) -> dict[str | None, tuple[Any, tuple[str, Any] | None]]:
        body = self.resources[rtype][rname]
        if "for_each" not in body:
            return {None: (body, None)}
        source = self.for_each(body["for_each"])
        return {k: (body, (k, v)) for k, v in source.items()}

    def for_each(self, expr: str) -> dict[str, Any]:
        m = re.fullmatch(r"\$\{\{for k, v in local\.(\w+) : k => v if v\.(\w+)\}\}", expr)
        if m:
            return {k: v for k, v in self.locals[m.group(1)].items() if self.ev(v[m.group(2)])}
        value = self.ev(expr)
        assert isinstance(value, dict), f"cannot iterate {expr}"
        return value

    def resource_name(self, rtype: str, rname: str, key: str | None) -> str:
        body, each = self.instances(rtype, rname)[key]
        return self.ev(body[TF_KINDS[rtype][1]], each)

    def policy_doc(self, name: str, key: str | None = None) -> dict[str, Any]:
        body = self.data["aws_iam_policy_document"][name]
        each = None
        if "for_each" in body:
            each = (key, self.for_each(body["for_each"])[key])
        statements = {}
        for st in body["statement"]:
            st = self.ev(st, each)
            conditions = {}
            for c in st.get("condition", []):
                conditions.setdefault(c["test"], {})[c["variable"]] = sorted(c["values"])
            principals = {}
            for p in st.get("principals", []):
                principals[p["type"]] = sorted(p["identifiers"])
            statements[st.get("sid", "")] = statement(
                st.get("effect", "Allow"), st["actions"], st.get("resources", []), conditions, principals
            )
        return statements


def statement(effect, actions, resources, conditions=None, principals=None) -> dict[str, Any]:
    as_list = lambda v: sorted(v) if isinstance(v, list) else [v]  # noqa: E731
    out = {"effect": effect, "actions": as_list(actions), "resources": as_list(resources)}
    if conditions:
        out["conditions"] = conditions
    if principals:
        out["principals"] = principals
    return out


def bucket_policy_doc(tf: Terraform) -> str:
    """The policy document aws_s3_bucket_policy.this uses, per bucket."""
    policy = tf.resources["aws_s3_bucket_policy"]["this"]["policy"]
    return re.fullmatch(r"\$\{data\.aws_iam_policy_document\.(\w+)\[each\.key\]\.json\}", policy).group(1)


# AWS name limits (S3 bucket names: 3-63 characters; EventBridge rule names: 1-64) and the
# longest parts a derived name takes besides the stack's variables.
BUCKET_NAME_MAX = 63
RULE_NAME_MAX = 64
ACCOUNT_ID_LEN = 12
REGION_MAX_LEN = 14  # ap-southeast-7, us-isob-east-1, eusc-de-east-1


def pattern_max(pattern: str) -> int | None:
    """The longest text `^[x][y]{1,N}$` or `^[y]{1,N}$` admits (None: unbounded or unknown)."""
    m = re.search(r"\^(\[[^\]]+\])?\[[^\]]+\]\{\d+,(\d+)\}\$", pattern)
    if not m:
        return None
    return int(m.group(2)) + (1 if m.group(1) else 0)


def name_limits(name_max: int | None, pipeline_max: int | None, suffixes: list[str]) -> dict[str, Any]:
    """The longest bucket and schedule rule names the inputs allow."""
    if name_max is None or pipeline_max is None:
        return {"name": name_max, "pipeline": pipeline_max, "bucket": None, "rule": None}
    bucket = name_max + 1 + ACCOUNT_ID_LEN + 1 + REGION_MAX_LEN + 1 + max(map(len, suffixes))
    return {"name": name_max, "pipeline": pipeline_max, "bucket": bucket,
            "rule": name_max + len("-sync-") + pipeline_max}


def tf_model(tf: Terraform) -> dict[str, Any]:
    r = tf.resources
    model: dict[str, Any] = {"buckets": {}, "functions": {}, "schedules": {}, "policies": {}}

    for key, (body, each) in tf.instances("aws_s3_bucket", "this").items():
        name = tf.ev(body["bucket"], each)

        def sub(rtype: str, k: str = key) -> Any:
            inst = tf.instances(rtype, "this")
            return tf.ev(inst[k][0], inst[k][1]) if k in inst else None

        pab = sub("aws_s3_bucket_public_access_block")
        enc = sub("aws_s3_bucket_server_side_encryption_configuration")
        ver = sub("aws_s3_bucket_versioning")
        life = sub("aws_s3_bucket_lifecycle_configuration")["rule"][0]
        own = sub("aws_s3_bucket_ownership_controls")
        expiration = life["expiration"][0]
        model["buckets"][name] = {
            "ownership": own["rule"][0]["object_ownership"],
            "public_access_block": {k: pab[k] for k in PAB_KEYS},
            "encryption": enc["rule"][0]["apply_server_side_encryption_by_default"][0]["sse_algorithm"],
            "versioned": bool(ver) and ver["versioning_configuration"][0]["status"] == "Enabled",
            "lifecycle": {
                "status": life["status"],
                "abort_incomplete_upload_days": life["abort_incomplete_multipart_upload"][0]["days_after_initiation"],
                "noncurrent_days": life["noncurrent_version_expiration"][0]["noncurrent_days"],
                "expire_days": expiration.get("days"),
                "expired_delete_marker": bool(expiration.get("expired_object_delete_marker")),
            },
            "policy": tf.policy_doc(bucket_policy_doc(tf), key),
        }

    t = tf.ev(r["aws_dynamodb_table"]["state"])
    model["table"] = {
        "name": t["name"],
        "billing": t["billing_mode"],
        "keys": sorted(
            [(t["hash_key"], "HASH"), (t["range_key"], "RANGE")]
        ),
        "attributes": sorted((a["name"], a["type"]) for a in t["attribute"]),
        "point_in_time_recovery": t["point_in_time_recovery"][0]["enabled"],
        "deletion_protection": t["deletion_protection_enabled"],
    }

    g = tf.ev(r["aws_glue_catalog_database"]["lake"])
    model["glue_database"] = {"name": g["name"], "location": g["location_uri"]}

    w = tf.ev(r["aws_athena_workgroup"]["query"])
    wc = w["configuration"][0]
    model["athena_workgroup"] = {
        "name": w["name"],
        "state": w["state"],
        "enforce": wc["enforce_workgroup_configuration"],
        "metrics": wc["publish_cloudwatch_metrics_enabled"],
        "output": wc["result_configuration"][0]["output_location"],
        "encryption": wc["result_configuration"][0]["encryption_configuration"][0]["encryption_option"],
    }

    logs = {n: tf.ev(b) for n, b in r["aws_cloudwatch_log_group"].items()}
    for fname, body in r["aws_lambda_function"].items():
        f = tf.ev(body)
        log = logs[fname]
        model["functions"][f["function_name"]] = {
            "description": f["description"],
            "role": tf.resource_name("aws_iam_role", fname, None),
            "runtime": f["runtime"],
            "handler": f["handler"],
            "architectures": f["architectures"],
            "memory": f["memory_size"],
            "timeout": f["timeout"],
            # Lambda's -1 is "no reservation", which SAM writes as no property (0 here).
            "reserved_concurrency": max(f["reserved_concurrent_executions"], 0),
            "environment": f["environment"][0]["variables"],
            "log_group": {"name": log["name"], "retention": log["retention_in_days"]},
            "depends_on_log_group": any("aws_cloudwatch_log_group.%s" % fname in d for d in body.get("depends_on", [])),
        }

    for pipeline, schedule in tf.vars["pipelines"].items():
        rule_body, each = tf.instances("aws_cloudwatch_event_rule", "schedule")[pipeline]
        rule = tf.ev(rule_body, each)
        target = tf.ev(r["aws_cloudwatch_event_target"]["schedule"], each)
        perm = tf.ev(r["aws_lambda_permission"]["schedule"], each)
        model["schedules"][rule["name"]] = {
            "description": rule["description"],
            "schedule": rule["schedule_expression"],
            "state": rule["state"],
            "target": target["arn"],
            "input": json.loads(target["input"]),
            "retry": {
                "attempts": target["retry_policy"][0]["maximum_retry_attempts"],
                "max_age": target["retry_policy"][0]["maximum_event_age_in_seconds"],
            },
            "dead_letter": target["dead_letter_config"][0]["arn"],
            "permission": {
                "action": perm["action"],
                "principal": perm["principal"],
                "function": perm["function_name"],
                "source": perm["source_arn"],
            },
        }
        assert schedule == rule["schedule_expression"]

    ic = tf.ev(r["aws_lambda_function_event_invoke_config"]["sync"])
    model["async_invoke"] = {
        ic["function_name"]: {
            "retries": ic["maximum_retry_attempts"],
            "max_age": ic["maximum_event_age_in_seconds"],
            "on_failure": ic["destination_config"][0]["on_failure"][0]["destination"],
        }
    }

    q = tf.ev(r["aws_sqs_queue"]["failures"])
    model["queue"] = {
        "name": q["name"],
        "retention": q["message_retention_seconds"],
        "sse_sqs": q["sqs_managed_sse_enabled"],
        "policy": tf.policy_doc("failures"),
    }

    a = tf.ev(r["aws_cloudwatch_metric_alarm"]["sync_errors"])
    model["alarms"] = {
        a["alarm_name"]: {
            "description": a["alarm_description"],
            "metric": (a["namespace"], a["metric_name"], a["statistic"]),
            "dimensions": a["dimensions"],
            "period": a["period"],
            "evaluation": (a["evaluation_periods"], a["datapoints_to_alarm"]),
            "threshold": (a["comparison_operator"], a["threshold"]),
            "missing_data": a["treat_missing_data"],
            "actions_configurable": "alarm_actions" in r["aws_cloudwatch_metric_alarm"]["sync_errors"],
        }
    }

    for rname, body in r["aws_iam_role"].items():
        role = tf.ev(body)
        policy = next(
            tf.ev(p) for p in r["aws_iam_role_policy"].values() if p["role"] == "${aws_iam_role.%s.id}" % rname
        )
        doc = re.fullmatch(r"data\.aws_iam_policy_document\.(\w+)\.json", r["aws_iam_role_policy"][rname]["policy"][2:-1])
        assume = re.fullmatch(r"data\.aws_iam_policy_document\.(\w+)\.json", body["assume_role_policy"][2:-1])
        model["policies"]["role " + role["name"]] = {
            "assume": tf.policy_doc(assume.group(1)),
            "inline " + policy["name"]: tf.policy_doc(doc.group(1)),
        }
    for pname, body in r["aws_iam_policy"].items():
        p = tf.ev(body)
        doc = re.fullmatch(r"data\.aws_iam_policy_document\.(\w+)\.json", body["policy"][2:-1])
        model["policies"]["managed " + p["name"]] = {"description": p["description"], "document": tf.policy_doc(doc.group(1))}

    model["kinds"] = tf_kinds(tf)
    suffixes = [b["suffix"] for b in tf.ev(tf.locals["buckets"]).values()]
    name_pattern = re.search(r'regex\(\\"(.*?)\\",', tf.validations.get("name", ""))
    pipe_pattern = re.search(r'regex\(\\"(.*?)\\",', tf.validations.get("pipelines", ""))
    model["name_limits"] = name_limits(
        pattern_max(name_pattern.group(1).replace("\\\\", "\\")) if name_pattern else None,
        pattern_max(pipe_pattern.group(1).replace("\\\\", "\\")) if pipe_pattern else None,
        suffixes,
    )
    return model


PAB_KEYS = ["block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"]

# The kinds of resources, counted the same way on both sides (a SAM function's Schedule event
# is a rule plus a permission; its EventInvokeConfig an event invoke config).
TF_KIND_NAMES = {
    "aws_s3_bucket": "s3 bucket",
    "aws_s3_bucket_policy": "s3 bucket policy",
    "aws_dynamodb_table": "dynamodb table",
    "aws_glue_catalog_database": "glue database",
    "aws_athena_workgroup": "athena workgroup",
    "aws_cloudwatch_log_group": "log group",
    "aws_lambda_function": "lambda function",
    "aws_lambda_function_event_invoke_config": "lambda event invoke config",
    "aws_lambda_permission": "lambda permission",
    "aws_cloudwatch_event_rule": "eventbridge rule",
    "aws_sqs_queue": "sqs queue",
    "aws_sqs_queue_policy": "sqs queue policy",
    "aws_cloudwatch_metric_alarm": "cloudwatch alarm",
    "aws_iam_role": "iam role",
    "aws_iam_policy": "iam managed policy",
}
# Terraform splits some resources in parts that CloudFormation keeps as properties.
TF_PARTS = {
    "aws_s3_bucket_ownership_controls", "aws_s3_bucket_public_access_block",
    "aws_s3_bucket_server_side_encryption_configuration", "aws_s3_bucket_versioning",
    "aws_s3_bucket_lifecycle_configuration", "aws_cloudwatch_event_target", "aws_iam_role_policy",
}


def tf_kinds(tf: Terraform) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for rtype, named in tf.resources.items():
        if rtype in TF_PARTS:
            continue
        kind = TF_KIND_NAMES.get(rtype, "unknown " + rtype)
        for rname in named:
            kinds[kind] = kinds.get(kind, 0) + len(tf.instances(rtype, rname))
    return dict(sorted(kinds.items()))


# --------------------------------------------------------------------------- SAM

CFN_KINDS = {
    "AWS::S3::Bucket": ("bucket", "BucketName"),
    "AWS::DynamoDB::Table": ("table", "TableName"),
    "AWS::SQS::Queue": ("queue", "QueueName"),
    "AWS::Logs::LogGroup": ("log_group", "LogGroupName"),
    "AWS::Serverless::Function": ("function", "FunctionName"),
    "AWS::IAM::Role": ("role", "RoleName"),
    "AWS::Glue::Database": ("glue_database", None),
    "AWS::Athena::WorkGroup": ("workgroup", "Name"),
    "AWS::IAM::ManagedPolicy": ("managed_policy", "ManagedPolicyName"),
}
CFN_REF = {"queue": "url", "managed_policy": "arn"}
CFN_GETATT = {"Arn": "arn", "QueueName": "name"}


class Sam:
    def __init__(self, template: dict[str, Any]) -> None:
        self.t = template
        self.params = {
            name: p["Default"] if "Default" in p else "{param.%s}" % snake(name)
            for name, p in template.get("Parameters", {}).items()
        }
        self.resources = template["Resources"]

    def name_of(self, logical: str) -> str:
        res = self.resources[logical]
        kind, prop = CFN_KINDS[res["Type"]]
        if res["Type"] == "AWS::Glue::Database":
            return self.ev(res["Properties"]["DatabaseInput"]["Name"])
        return self.ev(res["Properties"][prop])

    def ref(self, name: str) -> Any:
        pseudo = {"AWS::Partition": "{partition}", "AWS::Region": "{region}", "AWS::AccountId": "{account}",
                  "AWS::NoValue": None}
        if name in pseudo:
            return pseudo[name]
        if name in self.params:
            return self.params[name]
        kind = CFN_KINDS[self.resources[name]["Type"]][0]
        return attr(kind, CFN_REF.get(kind, "name"), self.name_of(name))

    def getatt(self, logical: str, attribute: str) -> str:
        kind = CFN_KINDS[self.resources[logical]["Type"]][0]
        value = attr(kind, CFN_GETATT[attribute], self.name_of(logical))
        # A log group's Arn attribute ends in ":*" (Terraform's arn does not).
        return value + ":*" if kind == "log_group" and attribute == "Arn" else value

    def condition(self, name: str) -> bool:
        return self.cond(self.t["Conditions"][name])

    def cond(self, c: Any) -> bool:
        (fn, args), = c.items()
        if fn == "Fn::Not":
            return not self.cond(args[0])
        if fn == "Fn::Equals":
            return str(self.ev(args[0])) == str(self.ev(args[1]))
        if fn == "Condition":
            return self.condition(args)
        raise ValueError(fn)

    def ev(self, v: Any) -> Any:
        if isinstance(v, list):
            return [x for x in (self.ev(i) for i in v) if x is not None]
        if not isinstance(v, dict):
            return v
        if len(v) == 1:
            (fn, args), = v.items()
            if fn == "Ref":
                return self.ref(args)
            if fn == "Fn::GetAtt":
                logical, attribute = args if isinstance(args, list) else args.split(".", 1)
                return self.getatt(logical, attribute)
            if fn == "Fn::Sub":
                return self.sub(args)
            if fn == "Fn::If":
                return self.ev(args[1] if self.condition(args[0]) else args[2])
        return {k: e for k, e in ((k, self.ev(x)) for k, x in v.items()) if e is not None}

    def sub(self, text: str) -> str:
        def one(m: re.Match) -> str:
            name = m.group(1)
            if "." in name and not name.startswith("AWS::"):
                return str(self.getatt(*name.split(".", 1)))
            return str(self.ref(name))
        return re.sub(r"\$\{([\w:.]+)\}", one, text)

    def policy(self, doc: dict[str, Any]) -> dict[str, Any]:
        statements = {}
        for st in self.ev(doc)["Statement"]:
            principals = st.get("Principal")
            if principals == "*":
                principals = {"*": ["*"]}
            elif principals:
                principals = {k: sorted(v if isinstance(v, list) else [v]) for k, v in principals.items()}
            conditions = {
                test: {k: sorted(v if isinstance(v, list) else [v]) for k, v in body.items()}
                for test, body in st.get("Condition", {}).items()
            }
            statements[st.get("Sid", "")] = statement(st["Effect"], st["Action"], st.get("Resource", []), conditions, principals)
        return statements


def sam_model(sam: Sam) -> dict[str, Any]:
    res = sam.resources
    model: dict[str, Any] = {"buckets": {}, "functions": {}, "schedules": {}, "policies": {}}
    globals_env = sam.t.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    by_type: dict[str, list[str]] = {}
    for logical, body in res.items():
        by_type.setdefault(body["Type"], []).append(logical)

    policies = {sam.ev(res[p]["Properties"]["Bucket"]): res[p]["Properties"]["PolicyDocument"]
                for p in by_type.get("AWS::S3::BucketPolicy", [])}
    for logical in by_type.get("AWS::S3::Bucket", []):
        p = sam.ev(res[logical]["Properties"])
        name = p["BucketName"]
        rule = p["LifecycleConfiguration"]["Rules"][0]
        pab = p["PublicAccessBlockConfiguration"]
        model["buckets"][name] = {
            "ownership": p["OwnershipControls"]["Rules"][0]["ObjectOwnership"],
            "public_access_block": {k: pab.get("".join(w.capitalize() for w in k.split("_"))) for k in PAB_KEYS},
            "encryption": p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"],
            "versioned": p.get("VersioningConfiguration", {}).get("Status") == "Enabled",
            "lifecycle": {
                "status": rule["Status"],
                "abort_incomplete_upload_days": rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"],
                "noncurrent_days": rule["NoncurrentVersionExpiration"]["NoncurrentDays"],
                "expire_days": rule.get("ExpirationInDays"),
                "expired_delete_marker": bool(rule.get("ExpiredObjectDeleteMarker")),
            },
            "policy": sam.policy(policies[name]) if name in policies else None,
        }

    t = sam.ev(res["StateTable"]["Properties"])
    model["table"] = {
        "name": t["TableName"],
        "billing": t["BillingMode"],
        "keys": sorted((k["AttributeName"], k["KeyType"]) for k in t["KeySchema"]),
        "attributes": sorted((a["AttributeName"], a["AttributeType"]) for a in t["AttributeDefinitions"]),
        "point_in_time_recovery": t["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
        "deletion_protection": t["DeletionProtectionEnabled"],
    }

    g = sam.ev(res["GlueDatabase"]["Properties"]["DatabaseInput"])
    model["glue_database"] = {"name": g["Name"], "location": g["LocationUri"]}

    w = sam.ev(res["AthenaWorkgroup"]["Properties"])
    wc = w["WorkGroupConfiguration"]
    model["athena_workgroup"] = {
        "name": w["Name"],
        "state": w["State"],
        "enforce": wc["EnforceWorkGroupConfiguration"],
        "metrics": wc["PublishCloudWatchMetricsEnabled"],
        "output": wc["ResultConfiguration"]["OutputLocation"],
        "encryption": wc["ResultConfiguration"]["EncryptionConfiguration"]["EncryptionOption"],
    }

    logs = {sam.name_of(lg): sam.ev(res[lg]["Properties"]) for lg in by_type.get("AWS::Logs::LogGroup", [])}
    model["async_invoke"] = {}
    for logical in by_type.get("AWS::Serverless::Function", []):
        body = res[logical]
        p = sam.ev(body["Properties"])
        name = p["FunctionName"]
        log_name = "/aws/lambda/" + name
        log = logs.get(log_name, {})
        env = dict(sam.ev(globals_env))
        env.update(p.get("Environment", {}).get("Variables", {}))
        depends = body.get("DependsOn", [])
        depends = depends if isinstance(depends, list) else [depends]
        role = re.fullmatch(r"arn:\{partition\}:iam::\{account\}:role/(.+)", p["Role"]).group(1)
        model["functions"][name] = {
            "description": p["Description"],
            "role": role,
            "runtime": p["Runtime"],
            "handler": p["Handler"],
            "architectures": p["Architectures"],
            "memory": p["MemorySize"],
            "timeout": p["Timeout"],
            "reserved_concurrency": p.get("ReservedConcurrentExecutions", 0),
            "environment": env,
            "log_group": {"name": log.get("LogGroupName"), "retention": log.get("RetentionInDays")},
            "depends_on_log_group": any(d in by_type.get("AWS::Logs::LogGroup", []) and sam.name_of(d) == log_name for d in depends),
        }
        fn_arn = attr("function", "arn", name)
        for event in p.get("Events", {}).values():
            if event["Type"] != "Schedule":
                continue
            e = event["Properties"]
            rule_name = e["Name"]
            model["schedules"][rule_name] = {
                "description": e["Description"],
                "schedule": e["Schedule"],
                "state": e["State"],
                "target": fn_arn,
                "input": json.loads(e["Input"]),
                "retry": {
                    "attempts": e["RetryPolicy"]["MaximumRetryAttempts"],
                    "max_age": e["RetryPolicy"]["MaximumEventAgeInSeconds"],
                },
                "dead_letter": e["DeadLetterConfig"]["Arn"],
                # SAM makes this permission for a Schedule event (scoped to the rule).
                "permission": {
                    "action": "lambda:InvokeFunction",
                    "principal": "events.amazonaws.com",
                    "function": name,
                    "source": attr("rule", "arn", rule_name),
                },
            }
        if "EventInvokeConfig" in p:
            ic = p["EventInvokeConfig"]
            model["async_invoke"][name] = {
                "retries": ic["MaximumRetryAttempts"],
                "max_age": ic["MaximumEventAgeInSeconds"],
                "on_failure": ic["DestinationConfig"]["OnFailure"]["Destination"],
            }

    q = sam.ev(res["FailureQueue"]["Properties"])
    queue_policy = next(res[qp] for qp in by_type.get("AWS::SQS::QueuePolicy", []))
    model["queue"] = {
        "name": q["QueueName"],
        "retention": q["MessageRetentionPeriod"],
        "sse_sqs": q["SqsManagedSseEnabled"],
        "policy": sam.policy(queue_policy["Properties"]["PolicyDocument"]),
    }

    model["alarms"] = {}
    for logical in by_type.get("AWS::CloudWatch::Alarm", []):
        raw = res[logical]["Properties"]
        a = sam.ev(raw)
        model["alarms"][a["AlarmName"]] = {
            "description": a["AlarmDescription"],
            "metric": (a["Namespace"], a["MetricName"], a["Statistic"]),
            "dimensions": {d["Name"]: d["Value"] for d in a["Dimensions"]},
            "period": a["Period"],
            "evaluation": (a["EvaluationPeriods"], a["DatapointsToAlarm"]),
            "threshold": (a["ComparisonOperator"], a["Threshold"]),
            "missing_data": a["TreatMissingData"],
            "actions_configurable": "AlarmActions" in raw,
        }

    for logical in by_type.get("AWS::IAM::Role", []):
        p = res[logical]["Properties"]
        entry = {"assume": sam.policy(p["AssumeRolePolicyDocument"])}
        for inline in p.get("Policies", []):
            entry["inline " + inline["PolicyName"]] = sam.policy(inline["PolicyDocument"])
        model["policies"]["role " + sam.name_of(logical)] = entry
    for logical in by_type.get("AWS::IAM::ManagedPolicy", []):
        p = res[logical]["Properties"]
        model["policies"]["managed " + sam.name_of(logical)] = {
            "description": sam.ev(p["Description"]),
            "document": sam.policy(p["PolicyDocument"]),
        }

    model["kinds"] = sam_kinds(sam, by_type)
    params = sam.t.get("Parameters", {})
    sam_suffixes = []
    for logical in by_type.get("AWS::S3::Bucket", []):
        raw = res[logical]["Properties"]["BucketName"]
        text = raw.get("Fn::Sub", "") if isinstance(raw, dict) else str(raw)
        sam_suffixes.append(text.rsplit("${AWS::Region}-", 1)[-1])
    model["name_limits"] = name_limits(
        pattern_max(params.get("Name", {}).get("AllowedPattern", "")),
        pattern_max(params.get("PipelineName", {}).get("AllowedPattern", "")),
        sam_suffixes,
    )
    return model


SAM_KIND_NAMES = {
    "AWS::S3::Bucket": "s3 bucket",
    "AWS::S3::BucketPolicy": "s3 bucket policy",
    "AWS::DynamoDB::Table": "dynamodb table",
    "AWS::Glue::Database": "glue database",
    "AWS::Athena::WorkGroup": "athena workgroup",
    "AWS::Logs::LogGroup": "log group",
    "AWS::Serverless::Function": "lambda function",
    "AWS::SQS::Queue": "sqs queue",
    "AWS::SQS::QueuePolicy": "sqs queue policy",
    "AWS::CloudWatch::Alarm": "cloudwatch alarm",
    "AWS::IAM::Role": "iam role",
    "AWS::IAM::ManagedPolicy": "iam managed policy",
}


def sam_kinds(sam: Sam, by_type: dict[str, list[str]]) -> dict[str, int]:
    kinds: dict[str, int] = {}

    def add(kind: str, n: int = 1) -> None:
        kinds[kind] = kinds.get(kind, 0) + n

    for rtype, logicals in by_type.items():
        add(SAM_KIND_NAMES.get(rtype, "unknown " + rtype), len(logicals))
        if rtype == "AWS::Serverless::Function":
            for logical in logicals:
                p = sam.resources[logical]["Properties"]
                schedules = [e for e in p.get("Events", {}).values() if e["Type"] == "Schedule"]
                if schedules:
                    add("eventbridge rule", len(schedules))
                    add("lambda permission", len(schedules))
                if "EventInvokeConfig" in p:
                    add("lambda event invoke config")
    return dict(sorted(kinds.items()))


# --------------------------------------------------------------------------- checks

def diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}/{k}"
            if k not in a:
                out.append(f"{p}: only in SAM: {json.dumps(b[k], default=str)[:300]}")
            elif k not in b:
                out.append(f"{p}: only in Terraform: {json.dumps(a[k], default=str)[:300]}")
            else:
                out.extend(diff(a[k], b[k], p))
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if list(a) == list(b):
            return []
        if len(a) == len(b):
            return [x for i, (x1, y1) in enumerate(zip(a, b)) for x in diff(x1, y1, f"{path}[{i}]")]
    if str(a) != str(b) or isinstance(a, bool) != isinstance(b, bool) or (a is None) != (b is None):
        return [f"{path}: Terraform {json.dumps(a, default=str)} != SAM {json.dumps(b, default=str)}"]
    return []


def all_statements(model: dict[str, Any]):
    for holder, docs in model["policies"].items():
        for doc_name, doc in docs.items():
            if isinstance(doc, dict) and doc_name != "assume":
                for sid, st in doc.items():
                    yield f"{holder}/{doc_name}/{sid}", st


def star_findings(model: dict[str, Any], side: str) -> list[str]:
    """Allow statements that grant `*` (or a whole service, or every resource of a kind)."""
    out = []
    for where, st in all_statements(model):
        if st["effect"] != "Allow":
            continue
        for action in st["actions"]:
            if "*" in action:
                out.append(f"{side} {where}: wildcard action {action}")
        for resource in st["resources"]:
            parts = resource.split(":", 5)
            resource_id = parts[5] if len(parts) == 6 else resource
            if resource == "*" or resource_id.startswith("*") or re.search(r":::\*", resource):
                unjustified = [a for a in st["actions"] if a not in STAR_RESOURCE_ALLOWED]
                if unjustified:
                    out.append(f"{side} {where}: resource {resource} for {', '.join(unjustified)}")
    return out


def expectations(tf: dict[str, Any], sam: dict[str, Any]) -> list[str]:
    """Facts both sides must have, from the code they deploy."""
    out = []
    rs = open(DYNAMODB_RS, encoding="utf-8").read()
    attrs = sorted((n, "S") for n in re.findall(r'attribute\("(\w+)"\)', rs))
    keys = sorted((n, {"Hash": "HASH", "Range": "RANGE"}[k]) for n, k in re.findall(r'key\("(\w+)", KeyType::(\w+)\)', rs))
    assert attrs and keys, "could not read the key schema from shared/src/state/dynamodb.rs"
    config_text = re.sub(r"#.*", "", open(EXAMPLE_CONFIG, encoding="utf-8").read())
    config_refs = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", config_text))
    for side, m in (("Terraform", tf), ("SAM", sam)):
        if m["table"]["keys"] != keys or m["table"]["attributes"] != attrs:
            out.append(f"{side}: table keys {m['table']['keys']} {m['table']['attributes']}, `skipprd store create` makes {keys} {attrs}")
        if m["table"]["billing"] != "PAY_PER_REQUEST" or m["table"]["point_in_time_recovery"] is not True:
            out.append(f"{side}: the table must be on-demand with point-in-time recovery")
        if len(m["functions"]) != 2:
            out.append(f"{side}: {len(m['functions'])} functions, expected sync and discover")
        for name, f in m["functions"].items():
            if f["runtime"] != "provided.al2023" or f["handler"] != "bootstrap":
                out.append(f"{side} {name}: runtime {f['runtime']} handler {f['handler']}")
            env = f["environment"]
            if env.get("WAL_STORAGE") != "s3" or not env.get("SKIPPR_CONFIG_S3_URI", "").startswith("s3://"):
                out.append(f"{side} {name}: needs WAL_STORAGE=s3 and an s3:// SKIPPR_CONFIG_S3_URI")
            missing = sorted(config_refs - set(env))
            if missing:
                out.append(f"{side} {name}: infra/skippr.example.yml refers to unset {missing}")
            if not f["depends_on_log_group"] or not f["log_group"]["retention"]:
                out.append(f"{side} {name}: needs its log group (with retention) created first")
        if not m["schedules"]:
            out.append(f"{side}: no schedule")
        for rule, s in m["schedules"].items():
            if set(s["input"]) != {"pipeline"}:
                out.append(f"{side} {rule}: input {s['input']} is not {{\"pipeline\": name}}")
        for name, b in m["buckets"].items():
            if not all(b["public_access_block"].values()):
                out.append(f"{side} bucket {name}: public access not fully blocked")
            if not b["encryption"]:
                out.append(f"{side} bucket {name}: no default encryption")
        if len(m["buckets"]) != 4:
            out.append(f"{side}: {len(m['buckets'])} buckets, expected skippr, wal, warehouse, athena-results")
        limits = m["name_limits"]
        if limits["bucket"] is None or limits["bucket"] > BUCKET_NAME_MAX:
            out.append(f"{side}: the longest name allows a bucket name of {limits['bucket']} characters, more than {BUCKET_NAME_MAX} ({limits})")
        if limits["rule"] is None or limits["rule"] > RULE_NAME_MAX:
            out.append(f"{side}: the longest name and pipeline allow a rule name of {limits['rule']} characters, more than {RULE_NAME_MAX} ({limits})")
        out.extend(star_findings(m, side))
    return out


def check(tf_model_: dict[str, Any], sam_model_: dict[str, Any]) -> list[str]:
    return diff(tf_model_, sam_model_) + expectations(tf_model_, sam_model_)


def load_terraform() -> tuple[dict[str, Any], Any]:
    files = {}
    for path in sorted(glob.glob(os.path.join(TF_MODULE, "*.tf"))):
        with open(path, encoding="utf-8") as f:
            files[path] = hcl2.load(f)
    with open(TF_EXAMPLE, encoding="utf-8") as f:
        example = hcl2.load(f)
    return files, example


def load_sam() -> dict[str, Any]:
    template, matches = decode(SAM_TEMPLATE)
    if matches or template is None:
        raise SystemExit(f"cannot parse {SAM_TEMPLATE}: {matches}")
    return template


def models(tf_files, tf_example, sam_template) -> tuple[dict[str, Any], dict[str, Any]]:
    return tf_model(Terraform(tf_files, tf_example)), sam_model(Sam(sam_template))


# --------------------------------------------------------------------------- self-test

def tf_statement(files, policy: str, sid: str) -> dict[str, Any]:
    for doc in files.values():
        for block in doc.get("data", []):
            for _, named in block.items():
                for name, body in named.items():
                    if unquote(name) == policy:
                        for st in body["statement"]:
                            if unquote(st.get("sid", "")) == sid:
                                return st
    raise KeyError((policy, sid))


def sam_statement(template, role: str, sid: str) -> dict[str, Any]:
    for st in template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]:
        if st.get("Sid") == sid:
            return st
    raise KeyError((role, sid))


def tf_resource(files, rtype: str, name: str) -> dict[str, Any]:
    for doc in files.values():
        for block in doc.get("resource", []):
            for t, named in block.items():
                if unquote(t) == rtype:
                    for n, body in named.items():
                        if unquote(n) == name:
                            return body
    raise KeyError((rtype, name))


def drop_tf_resource(files, rtype: str, name: str) -> None:
    for doc in files.values():
        for block in doc.get("resource", []):
            for t, named in list(block.items()):
                if unquote(t) == rtype:
                    for n in list(named):
                        if unquote(n) == name:
                            del named[n]


def mutations():
    """(description, function changing (tf_files, tf_example, sam_template) in place)."""
    def m1(tf, ex, sam):
        st = tf_statement(tf, "sync", "StateTable")
        st["actions"] = [a for a in st["actions"] if "ConditionCheckItem" not in a]

    def m2(tf, ex, sam):
        sam["Parameters"]["ScheduleExpression"]["Default"] = "rate(10 minutes)"

    def m3(tf, ex, sam):
        stmts = sam["Resources"]["DiscoverRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        stmts[:] = [s for s in stmts if s.get("Sid") != "SourceRead"]

    def m4(tf, ex, sam):
        sam["Resources"]["StateTable"]["Properties"]["AttributeDefinitions"][1]["AttributeType"] = "N"

    def m5(tf, ex, sam):
        sam_statement(sam, "SyncRole", "Logs")["Resource"] = "*"

    def m6(tf, ex, sam):
        del sam["Resources"]["WalBucket"]["Properties"]["PublicAccessBlockConfiguration"]["RestrictPublicBuckets"]

    def m7(tf, ex, sam):
        body = tf_resource(tf, "aws_cloudwatch_event_target", "schedule")
        body["input"] = body["input"].replace("pipeline", "name")

    def m8(tf, ex, sam):
        drop_tf_resource(tf, "aws_sqs_queue_policy", "failures")

    def m9(tf, ex, sam):
        st = tf_statement(tf, "sync", "Wal")
        st["resources"] = [r.replace("/wal/*", "/*") for r in st["resources"]]

    def m10(tf, ex, sam):
        sam["Globals"]["Function"]["Environment"]["Variables"].pop("SKIPPR_STATE_TABLE")

    def m11(tf, ex, sam):
        sam_statement(sam, "SyncRole", "GlueTables")["Action"].append("glue:*")

    def m12(tf, ex, sam):
        body = tf_resource(tf, "aws_lambda_function", "sync")
        body["timeout"] = 300

    # The same change on both sides: the sides still agree, so only the checks against the
    # code and the wildcard rule can catch these.
    def b1(tf, ex, sam):
        tf_statement(tf, "sync", "Logs")["resources"] = ['"*"']
        sam_statement(sam, "SyncRole", "Logs")["Resource"] = "*"

    def b2(tf, ex, sam):
        for doc in tf.values():
            for block in doc.get("resource", []):
                for t, named in block.items():
                    if unquote(t) == "aws_dynamodb_table":
                        named['"state"']["attribute"][1]["type"] = '"N"'
        sam["Resources"]["StateTable"]["Properties"]["AttributeDefinitions"][1]["AttributeType"] = "N"

    def b3(tf, ex, sam):
        for doc in tf.values():
            for block in doc.get("locals", []):
                block.get("environment", {}).pop("SKIPPR_STATE_TABLE", None)
        sam["Globals"]["Function"]["Environment"]["Variables"].pop("SKIPPR_STATE_TABLE")

    def b4(tf, ex, sam):
        tf_statement(tf, "sync", "Wal")["actions"].append('"s3:*"')
        sam_statement(sam, "SyncRole", "Wal")["Action"].append("s3:*")

    def b5(tf, ex, sam):
        sam["Parameters"]["PipelineName"]["AllowedPattern"] = "^[A-Za-z0-9_-]{1,40}$"
        for doc in tf.values():
            for block in doc.get("variable", []):
                if "pipelines" in block:
                    v = block["pipelines"]["validation"][0]
                    v["condition"] = v["condition"].replace("{1,38}", "{1,40}")

    def m13(tf, ex, sam):
        sam["Parameters"]["Name"]["AllowedPattern"] = "^[a-z][a-z0-9-]{1,24}$"

    return [
        ("both sides: pipeline names of 40 characters (rule names of 66)", b5, "rule name of"),
        ("SAM stack names of 25 characters (bucket names of 68)", m13),
        ("both sides: sync Logs statement grants Resource '*'", b1, "resource * for"),
        ("both sides: table sort key becomes a number", b2, "`skipprd store create` makes"),
        ("both sides: functions lose SKIPPR_STATE_TABLE", b3, "refers to unset ['SKIPPR_STATE_TABLE']"),
        ("both sides: WAL statement gains s3:*", b4, "wildcard action s3:*"),
        ("Terraform sync role loses dynamodb:ConditionCheckItem", m1),
        ("SAM schedule becomes rate(10 minutes)", m2),
        ("SAM discover role loses SourceRead", m3),
        ("SAM table sort key becomes a number", m4),
        ("SAM sync Logs statement grants Resource '*'", m5),
        ("SAM WAL bucket stops restricting public buckets", m6),
        ("Terraform schedule input key renamed", m7),
        ("Terraform loses the failure queue policy", m8),
        ("Terraform WAL statement widened from wal/* to the whole bucket", m9),
        ("SAM functions lose SKIPPR_STATE_TABLE", m10),
        ("SAM sync role gains glue:*", m11),
        ("Terraform sync timeout changes", m12),
    ]


def self_test(tf_files, tf_example, sam_template) -> int:
    failed = 0
    for description, mutate, *must_mention in mutations():
        tf, ex, sam = copy.deepcopy(tf_files), copy.deepcopy(tf_example), copy.deepcopy(sam_template)
        mutate(tf, ex, sam)
        try:
            problems = check(*models(tf, ex, sam))
        except (KeyError, TypeError, AttributeError, StopIteration) as e:
            problems = [f"could not evaluate: {e!r}"]
        if must_mention:
            problems = [p for p in problems if must_mention[0] in p]
        if problems:
            print(f"  caught: {description}: {problems[0][:160]}")
        else:
            print(f"  MISSED: {description}")
            failed += 1
    return failed


def main() -> int:
    tf_files, tf_example = load_terraform()
    sam_template = load_sam()
    tf, sam = models(tf_files, tf_example, sam_template)
    problems = check(tf, sam)
    print(
        f"compared: {sum(tf['kinds'].values())} resources of {len(tf['kinds'])} kinds, "
        f"{sum(1 for _ in all_statements(tf))} IAM statements, {len(tf['schedules'])} schedule(s), "
        f"{len(tf['buckets'])} buckets, {len(tf['functions'])} functions"
    )
    for p in problems:
        print("  " + p)
    if "--dump" in sys.argv:
        print(json.dumps({"terraform": tf, "sam": sam}, indent=1, default=str))
    failed = len(problems)
    if "--self-test" in sys.argv:
        print("self-test: each change below must be caught")
        missed = self_test(tf_files, tf_example, sam_template)
        print(f"{len(mutations()) - missed} passed, {missed} failed: self-test")
        failed += missed
    print(f"{1 if not problems else 0} passed, {1 if problems else 0} failed: terraform and sam describe the same system")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
