//! A save merges into the saved schema (never narrowing it) and is fenced by the lease.

use std::collections::BTreeMap;

use super::*;
use crate::schema::{Field, FieldType, MemorySchemaStore, NamespaceSchema};
use crate::state::MemoryStore;

fn schema(fields: &[(&str, FieldType)], records: u64) -> PipelineSchema {
    let mut s = PipelineSchema::empty("p", "w");
    s.namespaces = BTreeMap::from([(
        "events".to_owned(),
        NamespaceSchema {
            fields: fields
                .iter()
                .map(|(n, t)| Field::new(*n, t.clone()))
                .collect(),
            records,
        },
    )]);
    s
}

fn fields(s: &PipelineSchema) -> Vec<String> {
    s.namespaces["events"]
        .fields
        .iter()
        .map(|f| format!("{}: {}", f.name, f.field_type))
        .collect()
}

#[test]
fn a_save_keeps_every_saved_column_and_its_widest_type() {
    let schemas = MemorySchemaStore::default();
    let wide = schema(
        &[
            ("id", FieldType::Long),
            ("name", FieldType::String),
            ("price", FieldType::Double),
        ],
        10,
    );
    schemas.save(&wide).unwrap();
    // Today's data: small ids, no name, a new flag.
    let narrow = schema(&[("flag", FieldType::Boolean), ("id", FieldType::Int)], 3);
    let saved = save_schema(&schemas, &narrow, None, "p").unwrap();
    assert!(saved.changed);
    let expected = ["flag: boolean", "id: long", "name: string", "price: double"];
    assert_eq!(fields(&saved.schema), expected);
    assert_eq!(
        saved.schema.namespaces["events"].records, 3,
        "the caller's count"
    );
    assert_eq!(fields(&schemas.load().unwrap()), expected);
    // Saving what is already there writes nothing.
    let again = save_schema(&schemas, &narrow, None, "p").unwrap();
    assert!(!again.changed);
}

#[test]
fn a_writer_whose_lease_was_taken_over_saves_nothing() {
    let schemas = MemorySchemaStore::default();
    schemas
        .save(&schema(&[("id", FieldType::Long)], 1))
        .unwrap();
    let store = MemoryStore::default();
    let lease = StateKey::new("t#w#p", keys::LEASE);
    let old = store.put(&lease, b"old", Condition::Absent, None).unwrap();
    let new = store.put(&lease, b"new", Condition::Any, None).unwrap();
    let zombie = Fenced {
        store: &store,
        partition: "t#w#p",
        fence: Some(Fence { token: old }),
    };
    let err = save_schema(
        &schemas,
        &schema(&[("id", FieldType::Long), ("late", FieldType::String)], 1),
        Some(zombie),
        "p",
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            PipelineError::State {
                source: crate::state::StateError::Fenced { .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fields(&schemas.load().unwrap()), ["id: long"]);

    let holder = Fenced {
        fence: Some(Fence { token: new }),
        ..zombie
    };
    let saved = save_schema(
        &schemas,
        &schema(&[("id", FieldType::Int), ("now", FieldType::String)], 1),
        Some(holder),
        "p",
    )
    .unwrap();
    assert_eq!(saved.version, Some(2));
    assert_eq!(
        fields(&schemas.load().unwrap()),
        ["id: long", "now: string"]
    );
}
