//! The DynamoDB state store: every pipeline's items in one table.
//!
//! **Layout.** Partition key `pk` (S) = the [`StateKey`] partition
//! (`{tenant}#{workspace}#{pipeline}`), sort key `sk` (S) = the item's sort key. Attributes:
//! `value` (B, the caller's bytes) and `version` (N, grows by one with each write). The lease
//! item (`sk = lease`) also holds `holder` (S), `expires_at_ms` (N) and `ttl_ms` (N), see
//! [`super::dynamo_lease`].
//!
//! **Writes** are conditional `UpdateItem`s: `attribute_not_exists(pk)` for
//! [`Condition::Absent`], `version = :v` for [`Condition::Version`]; a
//! [`Condition::Any`] write bumps the version atomically
//! (`SET version = if_not_exists(version, :zero) + :one`) and reads it back from the response.
//! A **fenced** write is one `TransactWriteItems` of two items: a `ConditionCheck` that the
//! lease item is at `version = :token`, and the `Update`/`Delete` with its own condition.
//! Which of the two failed is read from the cancellation reasons: the lease check is
//! [`StateError::Fenced`], the item's condition [`StateError::Conflict`], each with the version
//! found (`ReturnValuesOnConditionCheckFailure = ALL_OLD`). A transaction cannot return the
//! new version, so a fenced `Any` write first reads the item's version and writes on
//! condition of it (again if another writer got in between).
//!
//! **Reads** are strongly consistent (`GetItem`, and `Query` with `begins_with(sk, :prefix)`,
//! page after page, for [`StateStore::scan_prefix`]).
//!
//! **Errors.** The SDK retries throttling, 5xx and transport errors with backoff (standard
//! mode, `AWS_MAX_ATTEMPTS`); what survives is [`StateError::Aws`], retryable when a later
//! attempt may succeed. Opening a store checks the table: a missing table is
//! [`StateError::TableMissing`] (it is created only on request, by [`create_table`], i.e.
//! `skipprd store create`), a table with other keys [`StateError::TableUnusable`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, Delete, KeySchemaElement,
    KeyType, ReturnValue, ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
    TransactWriteItem, Update,
};

use super::dynamo_lease::{LeaseRecord, LeaseTable};
use super::{Condition, Fence, Item, LEASE_SORT_KEY, StateError, StateKey, StateStore};
use crate::aws::{Aws, SdkFailure};

type Attrs = HashMap<String, AttributeValue>;

/// How long [`create_table`] waits for a new table to become active.
const CREATE_WAIT: Duration = Duration::from_secs(300);

/// How often a fenced `Any` write re-reads the version after losing a race to another writer.
const FENCED_ANY_ATTEMPTS: usize = 5;

/// The state store on one DynamoDB table (see the module docs for the layout).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    aws: Aws,
    client: aws_sdk_dynamodb::Client,
    table: String,
    /// Items per `Query` page (DynamoDB's 1 MB pages when `None`); tests make pages small.
    page_limit: Option<i32>,
}

/// What [`create_table`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableCreation {
    /// The table was created and is active.
    Created,
    /// A table of that name already existed, with the right keys.
    AlreadyExisted,
}

/// Create the store's table `table` (on-demand capacity, keys `pk`/`sk`) and wait until it
/// is active. An existing table with the right keys is left as it is.
pub fn create_table(aws: &Aws, table: &str) -> Result<TableCreation, StateError> {
    let client = aws.dynamodb();
    let build = |e: aws_sdk_dynamodb::error::BuildError| construction(table, table, e);
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
    };
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
    };
    let request = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attribute("pk").map_err(build)?)
        .attribute_definitions(attribute("sk").map_err(build)?)
        .key_schema(key("pk", KeyType::Hash).map_err(build)?)
        .key_schema(key("sk", KeyType::Range).map_err(build)?)
        .billing_mode(BillingMode::PayPerRequest);
    let creation = match aws.block_on(request.send()) {
        Ok(_) => TableCreation::Created,
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            TableCreation::AlreadyExisted
        }
        Err(e) => return Err(aws_error(table, table, "CreateTable", &e)),
    };
    let started = Instant::now();
    loop {
        match DynamoStore::open(aws, table) {
            Ok(_) => return Ok(creation),
            Err(e) if e.is_retryable() && started.elapsed() < CREATE_WAIT => {
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

fn construction(table: &str, key: &str, e: aws_sdk_dynamodb::error::BuildError) -> StateError {
    StateError::Aws {
        table: table.to_owned(),
        key: key.to_owned(),
        op: "build request",
        failure: Box::new(SdkFailure {
            code: "construction".into(),
            status: None,
            message: e.to_string(),
            retryable: false,
        }),
    }
}

fn aws_error<E, R>(table: &str, key: &str, op: &'static str, e: &SdkError<E, R>) -> StateError
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + crate::aws::HasStatus,
{
    StateError::Aws {
        table: table.to_owned(),
        key: key.to_owned(),
        op,
        failure: Box::new(SdkFailure::from_sdk(e)),
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The names and values an expression uses (DynamoDB rejects unused ones).
#[derive(Default)]
struct Expr {
    names: HashMap<String, String>,
    values: Attrs,
}

impl Expr {
    fn name(&mut self, placeholder: &str, attribute: &str) -> &mut Self {
        self.names
            .insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    fn value(&mut self, placeholder: &str, value: AttributeValue) -> &mut Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    fn values(&self) -> Option<Attrs> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// An item write: the update, its condition, and the version it sets when known in advance.
struct Write {
    update: String,
    condition: Option<String>,
    expr: Expr,
    new_version: Option<u64>,
}

fn write_of(value: &[u8], condition: Condition) -> Write {
    let mut expr = Expr::default();
    expr.name("#val", "value")
        .name("#ver", "version")
        .value(":val", AttributeValue::B(Blob::new(value.to_vec())));
    match condition {
        Condition::Any => {
            expr.value(":zero", n(0)).value(":one", n(1));
            Write {
                update: "SET #val = :val, #ver = if_not_exists(#ver, :zero) + :one".into(),
                condition: None,
                expr,
                new_version: None,
            }
        }
        Condition::Absent => {
            expr.value(":one", n(1));
            Write {
                update: "SET #val = :val, #ver = :one".into(),
                condition: Some("attribute_not_exists(pk)".into()),
                expr,
                new_version: Some(1),
            }
        }
        Condition::Version(v) => {
            expr.value(":expected", n(v))
                .value(":next", n(v.saturating_add(1)));
            Write {
                update: "SET #val = :val, #ver = :next".into(),
                condition: Some("#ver = :expected".into()),
                expr,
                new_version: Some(v.saturating_add(1)),
            }
        }
    }
}

/// A delete's condition, if any.
fn delete_condition(condition: Condition) -> (Option<String>, Expr) {
    let mut expr = Expr::default();
    let text = match condition {
        Condition::Any => None,
        Condition::Absent => Some("attribute_not_exists(pk)".to_owned()),
        Condition::Version(v) => {
            expr.name("#ver", "version").value(":expected", n(v));
            Some("#ver = :expected".to_owned())
        }
    };
    (text, expr)
}

/// Why a single-item write did not happen.
enum Failed {
    /// Its condition failed; the item as it was, if it existed.
    Condition(Option<Attrs>),
    /// Anything else, already a state error.
    Other(StateError),
}

/// What a fenced (two-item) transaction reported.
enum TxFailed {
    /// The lease check failed; the lease item as it was.
    Fence(Option<Attrs>),
    /// The item's own condition failed; the item as it was.
    Condition(Option<Attrs>),
    /// Anything else.
    Other(StateError),
}

impl DynamoStore {
    /// Open the store on `table`, checking that it exists and has the store's keys. Never
    /// creates it: a missing table is [`StateError::TableMissing`].
    pub fn open(aws: &Aws, table: &str) -> Result<DynamoStore, StateError> {
        let client = aws.dynamodb();
        let described = aws
            .block_on(client.describe_table().table_name(table).send())
            .map_err(|e| {
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception())
                {
                    StateError::TableMissing {
                        table: table.to_owned(),
                        region: aws.region().unwrap_or("unknown").to_owned(),
                    }
                } else {
                    aws_error(table, table, "DescribeTable", &e)
                }
            })?;
        let unusable = |message: String, retryable: bool| StateError::TableUnusable {
            table: table.to_owned(),
            message,
            retryable,
        };
        let description = described
            .table()
            .ok_or_else(|| unusable("DescribeTable returned no table".into(), true))?;
        let keys: Vec<(String, String)> = description
            .key_schema()
            .iter()
            .map(|k| {
                (
                    k.attribute_name().to_owned(),
                    k.key_type().as_str().to_owned(),
                )
            })
            .collect();
        let expected = [
            ("pk".to_owned(), "HASH".to_owned()),
            ("sk".to_owned(), "RANGE".to_owned()),
        ];
        if keys != expected {
            return Err(unusable(
                format!(
                    "its key schema is {keys:?}; the state store needs partition key `pk` (S) and sort key `sk` (S)"
                ),
                false,
            ));
        }
        for definition in description.attribute_definitions() {
            if definition.attribute_type() != &ScalarAttributeType::S {
                return Err(unusable(
                    format!(
                        "key attribute `{}` is of type {}; the state store needs strings (S)",
                        definition.attribute_name(),
                        definition.attribute_type().as_str()
                    ),
                    false,
                ));
            }
        }
        match description.table_status() {
            Some(TableStatus::Active | TableStatus::Updating) | None => {}
            Some(TableStatus::Creating) => {
                return Err(unusable("it is still being created".into(), true));
            }
            Some(other) => {
                return Err(unusable(format!("its status is {}", other.as_str()), false));
            }
        }
        Ok(DynamoStore {
            aws: aws.clone(),
            client,
            table: table.to_owned(),
            page_limit: None,
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn key_attrs(key: &StateKey) -> Attrs {
        HashMap::from([
            ("pk".to_owned(), s(&key.partition)),
            ("sk".to_owned(), s(&key.sort)),
        ])
    }

    fn version_of(&self, key: &StateKey, attrs: &Attrs) -> Result<u64, StateError> {
        match attrs.get("version") {
            Some(AttributeValue::N(v)) => v.parse().map_err(|_| self.corrupt(key, "version")),
            _ => Err(self.corrupt(key, "version")),
        }
    }

    /// The version in an item returned with a failed condition (`None`: no item).
    fn found_version(&self, key: &StateKey, attrs: Option<&Attrs>) -> Option<u64> {
        attrs.and_then(|a| self.version_of(key, a).ok())
    }

    fn corrupt(&self, key: &StateKey, attribute: &str) -> StateError {
        StateError::Corrupt {
            key: key.to_string(),
            message: format!(
                "attribute `{attribute}` is missing or of the wrong type in DynamoDB table '{}'",
                self.table
            ),
        }
    }

    fn item_of(&self, key: &StateKey, attrs: &Attrs) -> Result<Item, StateError> {
        let value = match attrs.get("value") {
            Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
            _ => return Err(self.corrupt(key, "value")),
        };
        Ok(Item {
            value,
            version: self.version_of(key, attrs)?,
        })
    }

    fn conflict(&self, key: &StateKey, condition: Condition, old: Option<&Attrs>) -> StateError {
        StateError::Conflict {
            key: key.to_string(),
            expected: condition,
            found: self.found_version(key, old),
        }
    }

    fn get_attrs(&self, key: &StateKey) -> Result<Option<Attrs>, StateError> {
        let out = self
            .aws
            .block_on(
                self.client
                    .get_item()
                    .table_name(&self.table)
                    .set_key(Some(Self::key_attrs(key)))
                    .consistent_read(true)
                    .send(),
            )
            .map_err(|e| aws_error(&self.table, &key.to_string(), "GetItem", &e))?;
        Ok(out.item)
    }

    /// One unfenced `UpdateItem`; returns the new version.
    fn update(&self, key: &StateKey, write: &Write) -> Result<u64, Failed> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key_attrs(key)))
            .update_expression(&write.update)
            .set_condition_expression(write.condition.clone())
            .set_expression_attribute_names(write.expr.names())
            .set_expression_attribute_values(write.expr.values())
            .return_values(ReturnValue::UpdatedNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match self.aws.block_on(request.send()) {
            Ok(out) => match write.new_version {
                Some(v) => Ok(v),
                None => out
                    .attributes()
                    .ok_or_else(|| Failed::Other(self.corrupt(key, "version")))
                    .and_then(|a| self.version_of(key, a).map_err(Failed::Other)),
            },
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => {
                    Err(Failed::Condition(c.item().cloned()))
                }
                _ => Err(Failed::Other(aws_error(
                    &self.table,
                    &key.to_string(),
                    "UpdateItem",
                    &e,
                ))),
            },
        }
    }

    /// One unfenced `DeleteItem`.
    fn delete_item(&self, key: &StateKey, condition: Condition) -> Result<(), Failed> {
        let (text, expr) = delete_condition(condition);
        let request = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(Self::key_attrs(key)))
            .set_condition_expression(text)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        match self.aws.block_on(request.send()) {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException(c)) => {
                    Err(Failed::Condition(c.item().cloned()))
                }
                _ => Err(Failed::Other(aws_error(
                    &self.table,
                    &key.to_string(),
                    "DeleteItem",
                    &e,
                ))),
            },
        }
    }

    /// The lease check of a fenced write.
    fn fence_check(&self, key: &StateKey, fence: Fence) -> Result<TransactWriteItem, StateError> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key_attrs(&StateKey::new(
                key.partition.clone(),
                LEASE_SORT_KEY,
            ))))
            .condition_expression("#ver = :token")
            .expression_attribute_names("#ver", "version")
            .expression_attribute_values(":token", n(fence.token))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| construction(&self.table, &key.to_string(), e))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// A two-item transaction: the lease check, then `op`.
    fn transact(
        &self,
        key: &StateKey,
        fence: Fence,
        op: TransactWriteItem,
    ) -> Result<(), TxFailed> {
        let check = self.fence_check(key, fence).map_err(TxFailed::Other)?;
        let request = self
            .client
            .transact_write_items()
            .transact_items(check)
            .transact_items(op);
        let e = match self.aws.block_on(request.send()) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        if let Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) =
            e.as_service_error()
        {
            let reasons = cancelled.cancellation_reasons();
            let failed = |i: usize| {
                reasons
                    .get(i)
                    .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                    .map(|r| r.item().cloned())
            };
            if let Some(lease) = failed(0) {
                return Err(TxFailed::Fence(lease));
            }
            if let Some(item) = failed(1) {
                return Err(TxFailed::Condition(item));
            }
            // Cancelled for another reason (a concurrent transaction on an item, throttling):
            // nothing was written; retryable.
            let codes: Vec<&str> = reasons.iter().filter_map(|r| r.code()).collect();
            let mut failure = SdkFailure::from_sdk(&e);
            failure.code = format!("TransactionCanceledException [{}]", codes.join(", "));
            failure.retryable = true;
            return Err(TxFailed::Other(StateError::Aws {
                table: self.table.clone(),
                key: key.to_string(),
                op: "TransactWriteItems",
                failure: Box::new(failure),
            }));
        }
        Err(TxFailed::Other(aws_error(
            &self.table,
            &key.to_string(),
            "TransactWriteItems",
            &e,
        )))
    }

    fn fenced_error(&self, key: &StateKey, fence: Fence, lease: Option<&Attrs>) -> StateError {
        let lease_key = StateKey::new(key.partition.clone(), LEASE_SORT_KEY);
        StateError::Fenced {
            key: key.to_string(),
            token: fence.token,
            current: self.found_version(&lease_key, lease),
        }
    }

    /// A fenced put of a key other than the lease item.
    fn put_fenced(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Fence,
    ) -> Result<u64, StateError> {
        for _ in 0..FENCED_ANY_ATTEMPTS {
            // A transaction returns no values: write `Any` on condition of the version now.
            let effective = match condition {
                Condition::Any => match self.get_attrs(key)? {
                    Some(a) => Condition::Version(self.version_of(key, &a)?),
                    None => Condition::Absent,
                },
                other => other,
            };
            let write = write_of(value, effective);
            let update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(Self::key_attrs(key)))
                .update_expression(&write.update)
                .set_condition_expression(write.condition.clone())
                .set_expression_attribute_names(write.expr.names())
                .set_expression_attribute_values(write.expr.values())
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(|e| construction(&self.table, &key.to_string(), e))?;
            let op = TransactWriteItem::builder().update(update).build();
            match self.transact(key, fence, op) {
                Ok(()) => {
                    return write
                        .new_version
                        .ok_or_else(|| self.corrupt(key, "version"));
                }
                Err(TxFailed::Fence(lease)) => {
                    return Err(self.fenced_error(key, fence, lease.as_ref()));
                }
                // Another writer wrote between our read and our write: read again.
                Err(TxFailed::Condition(_)) if condition == Condition::Any => continue,
                Err(TxFailed::Condition(old)) => {
                    return Err(self.conflict(key, condition, old.as_ref()));
                }
                Err(TxFailed::Other(e)) => return Err(e),
            }
        }
        Err(StateError::Conflict {
            key: key.to_string(),
            expected: condition,
            found: self
                .get_attrs(key)?
                .and_then(|a| self.version_of(key, &a).ok()),
        })
    }

    /// A fenced write of the lease item itself: one item, so the fence is folded into the
    /// item's own condition (a transaction may not touch an item twice).
    fn lease_item_condition(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Fence,
    ) -> Result<Condition, StateError> {
        match condition {
            Condition::Any => Ok(Condition::Version(fence.token)),
            Condition::Version(v) if v == fence.token => Ok(condition),
            // The fence and the condition cannot both hold: report whichever fails now.
            _ => {
                let current = self
                    .get_attrs(key)?
                    .map(|a| self.version_of(key, &a))
                    .transpose()?;
                if current == Some(fence.token) {
                    Err(StateError::Conflict {
                        key: key.to_string(),
                        expected: condition,
                        found: current,
                    })
                } else {
                    Err(StateError::Fenced {
                        key: key.to_string(),
                        token: fence.token,
                        current,
                    })
                }
            }
        }
    }

    fn lease_attrs(&self, key: &StateKey, attrs: &Attrs) -> Result<LeaseRecord, StateError> {
        let number = |name: &str| match attrs.get(name) {
            Some(AttributeValue::N(v)) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.corrupt(key, name)),
            Some(_) => Err(self.corrupt(key, name)),
            None => Ok(None),
        };
        let holder = match attrs.get("holder") {
            Some(AttributeValue::S(h)) => Some(h.clone()),
            Some(_) => return Err(self.corrupt(key, "holder")),
            None => None,
        };
        Ok(LeaseRecord {
            version: self.version_of(key, attrs)?,
            holder,
            expires_at_ms: number("expires_at_ms")?,
            ttl_ms: number("ttl_ms")?,
        })
    }

    /// A conditional lease update: `Ok(false)` when the condition failed.
    fn lease_update(
        &self,
        key: &StateKey,
        update: &str,
        condition: &str,
        expr: &Expr,
    ) -> Result<bool, StateError> {
        let write = Write {
            update: update.to_owned(),
            condition: Some(condition.to_owned()),
            expr: Expr {
                names: expr.names.clone(),
                values: expr.values.clone(),
            },
            new_version: Some(0),
        };
        match self.update(key, &write) {
            Ok(_) => Ok(true),
            Err(Failed::Condition(_)) => Ok(false),
            Err(Failed::Other(e)) => Err(e),
        }
    }
}

impl StateStore for DynamoStore {
    fn get(&self, key: &StateKey) -> Result<Option<Item>, StateError> {
        self.get_attrs(key)?
            .map(|a| self.item_of(key, &a))
            .transpose()
    }

    fn put(
        &self,
        key: &StateKey,
        value: &[u8],
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<u64, StateError> {
        let (condition, fenced_by) = match fence {
            Some(f) if key.sort == LEASE_SORT_KEY => {
                (self.lease_item_condition(key, condition, f)?, Some(f))
            }
            Some(f) => return self.put_fenced(key, value, condition, f),
            None => (condition, None),
        };
        match self.update(key, &write_of(value, condition)) {
            Ok(version) => Ok(version),
            Err(Failed::Condition(old)) => Err(match fenced_by {
                Some(f) => self.fenced_error(key, f, old.as_ref()),
                None => self.conflict(key, condition, old.as_ref()),
            }),
            Err(Failed::Other(e)) => Err(e),
        }
    }

    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError> {
        match fence {
            None => match self.delete_item(key, condition) {
                Ok(()) => Ok(()),
                Err(Failed::Condition(old)) => Err(self.conflict(key, condition, old.as_ref())),
                Err(Failed::Other(e)) => Err(e),
            },
            Some(f) if key.sort == LEASE_SORT_KEY => {
                let effective = self.lease_item_condition(key, condition, f)?;
                match self.delete_item(key, effective) {
                    Ok(()) => Ok(()),
                    Err(Failed::Condition(old)) => Err(self.fenced_error(key, f, old.as_ref())),
                    Err(Failed::Other(e)) => Err(e),
                }
            }
            Some(f) => {
                let (text, expr) = delete_condition(condition);
                let delete = Delete::builder()
                    .table_name(&self.table)
                    .set_key(Some(Self::key_attrs(key)))
                    .set_condition_expression(text)
                    .set_expression_attribute_names(expr.names())
                    .set_expression_attribute_values(expr.values())
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .build()
                    .map_err(|e| construction(&self.table, &key.to_string(), e))?;
                let op = TransactWriteItem::builder().delete(delete).build();
                match self.transact(key, f, op) {
                    Ok(()) => Ok(()),
                    Err(TxFailed::Fence(lease)) => Err(self.fenced_error(key, f, lease.as_ref())),
                    Err(TxFailed::Condition(old)) => {
                        Err(self.conflict(key, condition, old.as_ref()))
                    }
                    Err(TxFailed::Other(e)) => Err(e),
                }
            }
        }
    }

    fn scan_prefix(
        &self,
        partition: &str,
        sort_prefix: &str,
    ) -> Result<Vec<(String, Item)>, StateError> {
        let mut expr = Expr::default();
        expr.value(":pk", s(partition));
        let key_condition = if sort_prefix.is_empty() {
            "pk = :pk"
        } else {
            expr.value(":prefix", s(sort_prefix));
            "pk = :pk AND begins_with(sk, :prefix)"
        };
        let mut found = Vec::new();
        let mut start: Option<Attrs> = None;
        loop {
            let request = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression(key_condition)
                .set_expression_attribute_values(expr.values())
                .consistent_read(true)
                .set_limit(self.page_limit)
                .set_exclusive_start_key(start.take());
            let page = self.aws.block_on(request.send()).map_err(|e| {
                aws_error(
                    &self.table,
                    &format!("{partition}/{sort_prefix}*"),
                    "Query",
                    &e,
                )
            })?;
            for attrs in page.items() {
                let sort = match attrs.get("sk") {
                    Some(AttributeValue::S(sort)) => sort.clone(),
                    _ => {
                        return Err(self.corrupt(&StateKey::new(partition, sort_prefix), "sk"));
                    }
                };
                let key = StateKey::new(partition, sort.clone());
                found.push((sort, self.item_of(&key, attrs)?));
            }
            match page.last_evaluated_key() {
                Some(last) if !last.is_empty() => start = Some(last.clone()),
                _ => break,
            }
        }
        Ok(found)
    }
}

impl LeaseTable for DynamoStore {
    fn describe(&self) -> String {
        format!("DynamoDB table '{}'", self.table)
    }

    fn read_lease(&self, partition: &str) -> Result<Option<LeaseRecord>, StateError> {
        let key = StateKey::new(partition, LEASE_SORT_KEY);
        self.get_attrs(&key)?
            .map(|a| self.lease_attrs(&key, &a))
            .transpose()
    }

    fn take_lease(
        &self,
        partition: &str,
        observed: Option<&LeaseRecord>,
        holder: &str,
        expires_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<u64>, StateError> {
        let key = StateKey::new(partition, LEASE_SORT_KEY);
        let mut expr = Expr::default();
        expr.name("#val", "value")
            .name("#ver", "version")
            .name("#holder", "holder")
            .name("#exp", "expires_at_ms")
            .name("#ttl", "ttl_ms")
            .value(
                ":val",
                AttributeValue::B(Blob::new(holder.as_bytes().to_vec())),
            )
            .value(":holder", s(holder))
            .value(":exp", n(expires_at_ms))
            .value(":ttl", n(ttl_ms));
        let (condition, version) = match observed {
            None => ("attribute_not_exists(pk)".to_owned(), 1),
            Some(record) => {
                let next = record.version.saturating_add(1);
                expr.value(":seen", n(record.version));
                let expiry = match record.expires_at_ms {
                    Some(e) => {
                        expr.value(":seen_exp", n(e));
                        "#exp = :seen_exp"
                    }
                    None => "attribute_not_exists(#exp)",
                };
                (format!("#ver = :seen AND {expiry}"), next)
            }
        };
        expr.value(":next", n(version));
        let taken = self.lease_update(
            &key,
            "SET #val = :val, #ver = :next, #holder = :holder, #exp = :exp, #ttl = :ttl",
            &condition,
            &expr,
        )?;
        Ok(taken.then_some(version))
    }

    fn renew_lease(
        &self,
        partition: &str,
        token: u64,
        holder: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StateError> {
        let key = StateKey::new(partition, LEASE_SORT_KEY);
        let mut expr = Expr::default();
        expr.name("#ver", "version")
            .name("#holder", "holder")
            .name("#exp", "expires_at_ms")
            .value(":token", n(token))
            .value(":me", s(holder))
            .value(":exp", n(expires_at_ms));
        self.lease_update(
            &key,
            "SET #exp = :exp",
            "#ver = :token AND #holder = :me",
            &expr,
        )
    }

    fn release_lease(&self, partition: &str, token: u64, holder: &str) -> Result<bool, StateError> {
        let key = StateKey::new(partition, LEASE_SORT_KEY);
        let mut expr = Expr::default();
        expr.name("#ver", "version")
            .name("#holder", "holder")
            .name("#exp", "expires_at_ms")
            .value(":token", n(token))
            .value(":me", s(holder))
            .value(":zero", n(0));
        self.lease_update(
            &key,
            "SET #exp = :zero REMOVE #holder",
            "#ver = :token AND #holder = :me",
            &expr,
        )
    }
}

#[cfg(test)]
mod tests;
