//! Validation of a pipeline's `transform` section: each key with its `TRANSFORM_*` variable
//! fallback, checked into a [`Transform`].

use super::{ConfigError, FieldList, Origin, TimeUnit, Transform, TransformConfig, Validator};

impl Validator<'_> {
    pub(super) fn transform(
        &self,
        t: Option<&TransformConfig>,
        at: &str,
    ) -> Result<Transform, ConfigError> {
        let empty = TransformConfig::default();
        let t = t.unwrap_or(&empty);
        let list = |value: &Option<FieldList>, var: &str| -> Vec<String> {
            match value {
                Some(list) => list.0.clone(),
                None => self
                    .var(var)
                    .map(|v| FieldList::parse(&v).0)
                    .unwrap_or_default(),
            }
        };
        let flatten_events = match t.flatten_events {
            Some(b) => b,
            None => match self
                .var("TRANSFORM_FLATTEN_EVENTS")
                .map(|v| v.to_ascii_lowercase())
                .as_deref()
            {
                None | Some("false" | "0" | "no") => false,
                Some("true" | "1" | "yes") => true,
                Some(other) => {
                    return Err(self.invalid(
                        &Origin::Var("TRANSFORM_FLATTEN_EVENTS".to_owned()),
                        other,
                        "is not `true` or `false`",
                    ));
                }
            },
        };
        let batch_time_unit = match t.batch_time_unit {
            Some(u) => Some(u),
            None => match self.var("TRANSFORM_BATCH_TIME_UNIT") {
                None => None,
                Some(v) => Some(
                    serde_json::from_value::<TimeUnit>(serde_json::Value::String(
                        v.to_ascii_lowercase(),
                    ))
                    .map_err(|_| {
                        self.invalid(
                            &Origin::Var("TRANSFORM_BATCH_TIME_UNIT".to_owned()),
                            &v,
                            "is not one of year, month, day, hour, minute",
                        )
                    })?,
                ),
            },
        };
        let yes_no = |value: Option<bool>, var: &str| -> Result<bool, ConfigError> {
            match value {
                Some(b) => Ok(b),
                None => match self
                    .var(var)
                    .map(|v| v.trim().to_ascii_lowercase())
                    .as_deref()
                {
                    None | Some("" | "false" | "0" | "no") => Ok(false),
                    Some("true" | "1" | "yes") => Ok(true),
                    Some(other) => Err(self.invalid(
                        &Origin::Var(var.to_owned()),
                        other,
                        "is not `true` or `false`",
                    )),
                },
            }
        };
        let leniency = crate::sources::file::Leniency {
            single_quotes: yes_no(
                t.enable_single_quote_parsing,
                "TRANSFORM_ENABLE_SINGLE_QUOTE_PARSING",
            )?,
            unicode: yes_no(t.enable_unicode_parsing, "TRANSFORM_ENABLE_UNICODE_PARSING")?,
        };
        let time_partition_prefix = match &t.time_partition_prefix {
            Some(p) => Some(p.clone()),
            None => self
                .var("TRANSFORM_TIME_PARTITION_PREFIX")
                .filter(|v| !v.trim().is_empty()),
        };
        let transform = Transform {
            partition_allowed_values: list(
                &t.partition_allowed_values,
                "TRANSFORM_PARTITION_ALLOWED_VALUES",
            ),
            time_partition_prefix,
            leniency,
            namespace_fields: list(&t.namespace_fields, "TRANSFORM_NAMESPACE_FIELDS"),
            flatten_events,
            batch_partition_fields: list(
                &t.batch_partition_fields,
                "TRANSFORM_BATCH_PARTITION_FIELDS",
            ),
            batch_time_fields: list(&t.batch_time_fields, "TRANSFORM_BATCH_TIME_FIELDS"),
            batch_time_unit,
            batch_order_fields: list(&t.batch_order_fields, "TRANSFORM_BATCH_ORDER_FIELDS"),
            shape: crate::sources::shaped::Shape {
                record_path: match &t.record_field_path {
                    None => None,
                    Some(path) => {
                        let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
                        if path.trim().is_empty() || parts.iter().any(String::is_empty) {
                            return Err(self.bad_value(
                                &format!("{at}.record_field_path"),
                                &format!("'{path}' is not a valid dot path"),
                            ));
                        }
                        Some(parts)
                    }
                },
                inject: t
                    .inject_fields
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
        };
        for key in transform.shape.inject.iter().map(|(k, _)| k) {
            if key.trim().is_empty() {
                return Err(
                    self.bad_value(&format!("{at}.inject_fields"), "has an empty field name")
                );
            }
        }
        if !transform.batch_time_fields.is_empty() && transform.batch_time_unit.is_none() {
            return Err(self.bad_value(
                &format!("{at}.batch_time_unit"),
                "is required when batch_time_fields is set",
            ));
        }
        if let Some(name) = &transform.time_partition_prefix {
            let valid = !name.is_empty()
                && name.len() <= 128
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(self.bad_value(
                    &format!("{at}.time_partition_prefix"),
                    &format!(
                        "'{name}' is not a partition key name (letters, digits and `_`, not starting with a digit, at most 128 bytes)"
                    ),
                ));
            }
            if transform.batch_time_fields.is_empty() {
                return Err(self.bad_value(
                    &format!("{at}.time_partition_prefix"),
                    "names the time partition, and batch_time_fields is not set",
                ));
            }
            if transform
                .batch_partition_fields
                .iter()
                .any(|f| f.replace('.', "_") == *name)
            {
                return Err(self.bad_value(
                    &format!("{at}.time_partition_prefix"),
                    &format!("'{name}' is also the name of a batch_partition_fields partition"),
                ));
            }
        }
        if !transform.partition_allowed_values.is_empty()
            && transform.batch_partition_fields.is_empty()
        {
            return Err(self.bad_value(
                &format!("{at}.partition_allowed_values"),
                "limits the values of batch_partition_fields partitions, and batch_partition_fields is not set",
            ));
        }
        for field in transform
            .namespace_fields
            .iter()
            .chain(&transform.batch_partition_fields)
        {
            if field.split('.').any(str::is_empty) {
                return Err(self.bad_value(at, &format!("'{field}' is not a valid dot path")));
            }
        }
        Ok(transform)
    }
}
