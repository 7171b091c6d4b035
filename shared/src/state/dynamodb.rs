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
//! **Ambiguous outcomes.** A write whose request timed out, got a 5xx or lost its connection
//! may have applied. The SDK may send it again, and that retry fails its condition because the
//! first attempt applied; or the error reaches the store. Either way the store reads the item
//! (the one DynamoDB returns with a failed condition, or a fresh strongly consistent read):
//! an item that is exactly what the write leaves (its value, and its version when the write
//! sets a known one) means the write applied, and it is a success. A failed request after
//! which the item does not show the write is sent again with the same condition (at most one
//! attempt can apply), up to twice; a delete whose outcome is unknown is done when the item
//! is gone. Lease updates are
//! resolved the same way, by holder, version and expiry (`dynamodb/lease_items.rs`).
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

use super::{Condition, Fence, Item, LEASE_SORT_KEY, StateError, StateKey, StateStore};
use crate::aws::{Aws, SdkFailure};

type Attrs = HashMap<String, AttributeValue>;

/// How long [`create_table`] waits for a new table to become active.
const CREATE_WAIT: Duration = Duration::from_secs(300);

/// How often a fenced `Any` write re-reads the version after losing a race to another writer.
const FENCED_ANY_ATTEMPTS: usize = 5;

/// How many times a write whose outcome is unknown, and which the item does not show, is sent
/// again (see [`DynamoStore::after_unknown`]); on top of the SDK's own retries.
const UNKNOWN_OUTCOME_RETRIES: usize = 2;

/// The pause before sending a write again after an unknown outcome: 100 ms, then 200 ms.
fn resend_backoff(resent: usize) -> Duration {
    Duration::from_millis(100 << resent.saturating_sub(1).min(4))
}

/// Whether `e` leaves the outcome of the write unknown: a request that failed in a way a later
/// attempt may not (a timeout, a 5xx, a dropped connection, throttling), so it may have
/// applied. A refused request (validation, access) did not apply.
fn unknown_outcome(e: &StateError) -> bool {
    matches!(e, StateError::Aws { failure, .. } if failure.retryable)
}

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

    /// An unfenced delete, resolved when ambiguous: an unknown outcome after which the item is
    /// gone is done. `refused` makes the error of a failed condition from the item found.
    fn delete_resolved(
        &self,
        key: &StateKey,
        condition: Condition,
        refused: impl Fn(Option<Attrs>) -> StateError,
    ) -> Result<(), StateError> {
        let mut resent = 0;
        loop {
            match self.delete_item(key, condition) {
                Ok(()) => return Ok(()),
                Err(Failed::Condition(old)) => return Err(refused(old)),
                Err(Failed::Other(e)) => {
                    if self.delete_after_unknown(key, e, &mut resent)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The version of the item `attrs` when it is exactly what writing `value` leaves (the
    /// value, and the version when `new_version` is known): the write applied.
    fn shows_write(
        &self,
        key: &StateKey,
        attrs: Option<&Attrs>,
        value: &[u8],
        new_version: Option<u64>,
    ) -> Option<u64> {
        let item = self.item_of(key, attrs?).ok()?;
        (item.value == value && new_version.is_none_or(|v| v == item.version))
            .then_some(item.version)
    }

    /// A write of `value` failed with `error`. When its outcome is unknown, read the item: if
    /// it shows the write, that is its version (`Ok(Some)`); if not and it may be sent again
    /// (`resent` counts), `Ok(None)` after a pause. Otherwise `error`.
    fn after_unknown(
        &self,
        key: &StateKey,
        value: &[u8],
        new_version: Option<u64>,
        error: StateError,
        resent: &mut usize,
    ) -> Result<Option<u64>, StateError> {
        if !unknown_outcome(&error) {
            return Err(error);
        }
        let Ok(found) = self.get_attrs(key) else {
            return Err(error);
        };
        if let Some(version) = self.shows_write(key, found.as_ref(), value, new_version) {
            tracing::debug!(key = %key, error = %error, "A write whose outcome was unknown had applied.");
            return Ok(Some(version));
        }
        if *resent >= UNKNOWN_OUTCOME_RETRIES {
            return Err(error);
        }
        *resent += 1;
        std::thread::sleep(resend_backoff(*resent));
        Ok(None)
    }

    /// After a delete failed with `error`: `Ok(true)` when the item is gone (the delete, or
    /// an attempt of it, applied), `Ok(false)` when it may be sent again, else `error`.
    fn delete_after_unknown(
        &self,
        key: &StateKey,
        error: StateError,
        resent: &mut usize,
    ) -> Result<bool, StateError> {
        if !unknown_outcome(&error) {
            return Err(error);
        }
        match self.get_attrs(key) {
            Ok(None) => Ok(true),
            Ok(Some(_)) if *resent < UNKNOWN_OUTCOME_RETRIES => {
                *resent += 1;
                std::thread::sleep(resend_backoff(*resent));
                Ok(false)
            }
            _ => Err(error),
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
        let mut resent = 0;
        let mut attempt = 0;
        while attempt < FENCED_ANY_ATTEMPTS {
            attempt += 1;
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
                // An earlier attempt of this very write applied (the SDK retried it).
                Err(TxFailed::Condition(old))
                    if self
                        .shows_write(key, old.as_ref(), value, write.new_version)
                        .is_some() =>
                {
                    return write
                        .new_version
                        .ok_or_else(|| self.corrupt(key, "version"));
                }
                // Another writer wrote between our read and our write: read again.
                Err(TxFailed::Condition(_)) if condition == Condition::Any => continue,
                Err(TxFailed::Condition(old)) => {
                    return Err(self.conflict(key, condition, old.as_ref()));
                }
                Err(TxFailed::Other(e)) => {
                    match self.after_unknown(key, value, write.new_version, e, &mut resent)? {
                        Some(version) => return Ok(version),
                        // Not applied: send it again (an `Any` write on the version now).
                        None => attempt -= 1,
                    }
                }
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
        let write = write_of(value, condition);
        let mut resent = 0;
        loop {
            match self.update(key, &write) {
                Ok(version) => return Ok(version),
                Err(Failed::Condition(old)) => {
                    // An earlier attempt of this very write applied (the SDK retried it).
                    if let Some(version) =
                        self.shows_write(key, old.as_ref(), value, write.new_version)
                    {
                        return Ok(version);
                    }
                    return Err(match fenced_by {
                        Some(f) => self.fenced_error(key, f, old.as_ref()),
                        None => self.conflict(key, condition, old.as_ref()),
                    });
                }
                Err(Failed::Other(e)) => {
                    if let Some(version) =
                        self.after_unknown(key, value, write.new_version, e, &mut resent)?
                    {
                        return Ok(version);
                    }
                }
            }
        }
    }

    fn delete(
        &self,
        key: &StateKey,
        condition: Condition,
        fence: Option<Fence>,
    ) -> Result<(), StateError> {
        match fence {
            None => self.delete_resolved(key, condition, |old| {
                self.conflict(key, condition, old.as_ref())
            }),
            Some(f) if key.sort == LEASE_SORT_KEY => {
                let effective = self.lease_item_condition(key, condition, f)?;
                self.delete_resolved(key, effective, |old| {
                    self.fenced_error(key, f, old.as_ref())
                })
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
                let mut resent = 0;
                loop {
                    match self.transact(key, f, op.clone()) {
                        Ok(()) => return Ok(()),
                        Err(TxFailed::Fence(lease)) => {
                            return Err(self.fenced_error(key, f, lease.as_ref()));
                        }
                        Err(TxFailed::Condition(old)) => {
                            return Err(self.conflict(key, condition, old.as_ref()));
                        }
                        Err(TxFailed::Other(e)) => {
                            if self.delete_after_unknown(key, e, &mut resent)? {
                                return Ok(());
                            }
                        }
                    }
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

mod lease_items;

#[cfg(test)]
mod tests;
