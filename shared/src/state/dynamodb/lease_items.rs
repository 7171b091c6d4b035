//! The lease items of the DynamoDB store ([`LeaseTable`]): taking, renewing and releasing
//! the `lease` item with conditional `UpdateItem`s (see [`super::super::dynamo_lease`]), each
//! resolved when its outcome is ambiguous (`lease_update`).

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;

use super::{
    Attrs, DynamoStore, Expr, Failed, UNKNOWN_OUTCOME_RETRIES, Write, n, resend_backoff, s,
    unknown_outcome,
};
use crate::state::dynamo_lease::{LeaseRecord, LeaseTable};
use crate::state::{LEASE_SORT_KEY, StateError, StateKey};

impl DynamoStore {
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

    /// A conditional lease update: `Ok(false)` when the condition failed and the item does not
    /// show the update (`applied`: whether a lease record is what this update leaves).
    ///
    /// The outcome of a request can be unknown: a timeout, a 5xx or a dropped connection after
    /// DynamoDB applied it. The SDK may then send it again, and the retry fails its condition
    /// because the first attempt applied; or the error reaches us. Either way the item is
    /// read (the one returned with the failed condition, or a fresh read), and an item that
    /// shows the update is success. An error after which the item does not show it is sent
    /// again (the same condition: at most one attempt applies), at most
    /// [`UNKNOWN_OUTCOME_RETRIES`] times.
    fn lease_update(
        &self,
        key: &StateKey,
        update: &str,
        condition: &str,
        expr: &Expr,
        applied: &dyn Fn(&LeaseRecord) -> bool,
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
        let shows = |attrs: Option<&Attrs>| {
            attrs
                .and_then(|a| self.lease_attrs(key, a).ok())
                .is_some_and(|record| applied(&record))
        };
        let mut resent = 0;
        loop {
            match self.update(key, &write) {
                Ok(_) => return Ok(true),
                Err(Failed::Condition(old)) => return Ok(shows(old.as_ref())),
                Err(Failed::Other(e)) if unknown_outcome(&e) => {
                    let Ok(found) = self.get_attrs(key) else {
                        return Err(e);
                    };
                    if shows(found.as_ref()) {
                        return Ok(true);
                    }
                    if resent >= UNKNOWN_OUTCOME_RETRIES {
                        return Err(e);
                    }
                    resent += 1;
                    std::thread::sleep(resend_backoff(resent));
                }
                Err(Failed::Other(e)) => return Err(e),
            }
        }
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
            &|found| {
                found.version == version
                    && found.holder.as_deref() == Some(holder)
                    && found.expires_at_ms == Some(expires_at_ms)
            },
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
            &|found| {
                found.version == token
                    && found.holder.as_deref() == Some(holder)
                    && found.expires_at_ms == Some(expires_at_ms)
            },
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
            &|found| found.version == token && found.holder.is_none(),
        )
    }
}
