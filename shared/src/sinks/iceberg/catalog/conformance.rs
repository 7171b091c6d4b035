//! One suite, run against every [`Pointer`] (as `state::conformance` is against every store):
//! the Hadoop pointer, the store pointer over the embedded store, the memory store and
//! DynamoDB, and the Glue pointer over the Glue double and over the SDK on moto. It drives
//! each pointer directly and through a [`FileCatalog`] over it.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    NestedField, PrimitiveType, Schema, TableMetadata, TableMetadataBuilder, Type,
};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent, TableUpdate};

use super::{Current, FileCatalog, LakePointer, Pointer, TableRef};

/// Where one run of the suite works.
pub(crate) struct Place {
    /// The pointer, over a catalog in which no name starting with [`Place::prefix`] exists.
    pub pointer: LakePointer,
    /// The warehouse URI (`file:///...` or `s3://bucket/prefix`).
    pub warehouse: String,
    /// A file I/O that reaches the warehouse.
    pub file_io: FileIO,
    /// The start of every namespace the suite makes (lowercase letters, digits and `_`, as
    /// Glue databases need), unique to the run when the catalog is shared (moto's Glue).
    pub prefix: String,
    /// Whether the pointer refuses a swap conditioned on a version that is no longer the
    /// current one. Every real pointer does; moto's Glue does not (it accepts an
    /// `UpdateTable` with a stale `VersionId`), so the run of the SDK pointer on moto turns
    /// that one scenario off.
    pub refuses_stale_swaps: bool,
}

/// Runs every scenario on `place`.
pub(crate) fn run(place: Place) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let suite = Suite {
        catalog: FileCatalog::at(
            place.warehouse.clone(),
            place.file_io.clone(),
            place.pointer.clone(),
        ),
        place,
    };
    runtime.block_on(async {
        suite.a_missing_table_and_namespace_are_absent().await;
        suite.namespaces_are_created_once_and_listed().await;
        suite
            .the_first_publish_creates_the_table_and_a_second_is_a_conflict()
            .await;
        suite
            .a_swap_from_the_current_version_publishes_the_next()
            .await;
        if suite.place.refuses_stale_swaps {
            suite.a_swap_from_a_stale_version_is_refused().await;
        }
        suite.tables_are_listed_by_namespace().await;
        suite
            .the_catalog_creates_loads_and_commits_through_the_pointer()
            .await;
    });
}

struct Suite {
    place: Place,
    catalog: FileCatalog<LakePointer>,
}

fn schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap()
}

impl Suite {
    fn pointer(&self) -> &LakePointer {
        self.catalog.pointer()
    }

    /// A namespace of this run, created.
    async fn namespace(&self, name: &str) -> NamespaceIdent {
        let namespace = NamespaceIdent::new(format!("{}{name}", self.place.prefix));
        self.catalog
            .create_namespace(&namespace, HashMap::new())
            .await
            .unwrap();
        namespace
    }

    fn location(&self, ident: &TableIdent) -> String {
        self.catalog.table_location(ident)
    }

    /// The first metadata of the table `ident`.
    fn first_metadata(&self, ident: &TableIdent) -> TableMetadata {
        let creation = TableCreation::builder()
            .name(ident.name().to_owned())
            .schema(schema())
            .location(self.location(ident))
            .build();
        TableMetadataBuilder::from_table_creation(creation)
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    /// The metadata after `previous` (read at `location`), with one more property.
    fn next_metadata(previous: &TableMetadata, location: &str, key: &str) -> TableMetadata {
        previous
            .clone()
            .into_builder(Some(location.to_owned()))
            .set_properties(HashMap::from([(key.to_owned(), "yes".to_owned())]))
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    async fn current(&self, ident: &TableIdent) -> Option<Current> {
        let location = self.location(ident);
        self.pointer()
            .current(TableRef {
                ident,
                location: &location,
            })
            .await
            .unwrap()
    }

    async fn publish(
        &self,
        ident: &TableIdent,
        previous: Option<&Current>,
        metadata: &TableMetadata,
    ) -> iceberg::Result<String> {
        let location = self.location(ident);
        self.pointer()
            .publish(
                &self.place.file_io,
                TableRef {
                    ident,
                    location: &location,
                },
                previous,
                metadata,
            )
            .await
    }

    /// The metadata in the file at `location`.
    async fn read(&self, location: &str) -> TableMetadata {
        let bytes = self
            .place
            .file_io
            .new_input(location)
            .unwrap()
            .read()
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn assert_conflict(error: &iceberg::Error) {
        assert_eq!(error.kind(), ErrorKind::CatalogCommitConflicts, "{error}");
        assert!(error.retryable(), "a lost swap is retryable: {error}");
    }

    async fn a_missing_table_and_namespace_are_absent(&self) {
        let missing = NamespaceIdent::new(format!("{}never", self.place.prefix));
        let ident = TableIdent::new(missing.clone(), "t".to_owned());
        assert_eq!(self.current(&ident).await, None);
        assert!(!self.catalog.namespace_exists(&missing).await.unwrap());
        assert!(self.catalog.list_tables(&missing).await.unwrap().is_empty());
        assert!(!self.catalog.table_exists(&ident).await.unwrap());
        let error = self.catalog.load_table(&ident).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TableNotFound, "{error}");
        // A namespace that exists, without the table.
        let namespace = self.namespace("empty").await;
        let ident = TableIdent::new(namespace.clone(), "t".to_owned());
        assert_eq!(self.current(&ident).await, None);
        assert!(
            self.catalog
                .list_tables(&namespace)
                .await
                .unwrap()
                .is_empty()
        );
    }

    async fn namespaces_are_created_once_and_listed(&self) {
        let a = self.namespace("ns_a").await;
        let b = self.namespace("ns_b").await;
        // Creating one again is not an error.
        self.namespace("ns_a").await;
        for namespace in [&a, &b] {
            assert!(self.catalog.namespace_exists(namespace).await.unwrap());
            assert_eq!(
                self.catalog.get_namespace(namespace).await.unwrap().name(),
                namespace
            );
        }
        let missing = NamespaceIdent::new(format!("{}ns_c", self.place.prefix));
        assert!(!self.catalog.namespace_exists(&missing).await.unwrap());
        assert_eq!(
            self.catalog
                .get_namespace(&missing)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NamespaceNotFound
        );
        // The catalog may hold others' namespaces too (moto's Glue is shared): ours are the
        // ones with the prefix.
        let ours: Vec<NamespaceIdent> = self
            .catalog
            .list_namespaces(None)
            .await
            .unwrap()
            .into_iter()
            .filter(|n| {
                n.to_url_string()
                    .starts_with(&format!("{}ns_", self.place.prefix))
            })
            .collect();
        assert_eq!(ours, [a.clone(), b]);
        assert!(
            self.catalog
                .list_namespaces(Some(&a))
                .await
                .unwrap()
                .is_empty()
        );
    }

    async fn the_first_publish_creates_the_table_and_a_second_is_a_conflict(&self) {
        let namespace = self.namespace("first").await;
        let ident = TableIdent::new(namespace, "t".to_owned());
        let metadata = self.first_metadata(&ident);
        let location = self.publish(&ident, None, &metadata).await.unwrap();
        let current = self.current(&ident).await.expect("published");
        assert_eq!(current.version, 1);
        assert_eq!(current.location, location);
        assert_eq!(self.read(&location).await, metadata);

        // Another writer that also saw no table loses: the first version is taken.
        let other = self.first_metadata(&ident);
        let error = self.publish(&ident, None, &other).await.unwrap_err();
        Self::assert_conflict(&error);
        let after = self.current(&ident).await.expect("still there");
        assert_eq!((after.version, &after.location), (1, &location));
        assert_eq!(self.read(&location).await, metadata);
    }

    async fn a_swap_from_the_current_version_publishes_the_next(&self) {
        let namespace = self.namespace("swap").await;
        let ident = TableIdent::new(namespace, "t".to_owned());
        let first = self.first_metadata(&ident);
        self.publish(&ident, None, &first).await.unwrap();
        let v1 = self.current(&ident).await.expect("published");
        let second = Self::next_metadata(&first, &v1.location, "second");
        let location = self.publish(&ident, Some(&v1), &second).await.unwrap();
        assert_ne!(location, v1.location);
        let v2 = self.current(&ident).await.expect("published");
        assert_eq!(v2.version, 2);
        assert_eq!(v2.location, location);
        assert_eq!(self.read(&location).await, second);
        // And on from there.
        let third = Self::next_metadata(&second, &v2.location, "third");
        let location = self.publish(&ident, Some(&v2), &third).await.unwrap();
        let v3 = self.current(&ident).await.expect("published");
        assert_eq!((v3.version, v3.location), (3, location));
        // The version before stays readable: its file is the previous metadata.
        assert_eq!(self.read(&v1.location).await, first);
    }

    async fn a_swap_from_a_stale_version_is_refused(&self) {
        let namespace = self.namespace("stale").await;
        let ident = TableIdent::new(namespace, "t".to_owned());
        let first = self.first_metadata(&ident);
        self.publish(&ident, None, &first).await.unwrap();
        let v1 = self.current(&ident).await.expect("published");
        // Two writers read version 1; the first to swap wins.
        let winner = Self::next_metadata(&first, &v1.location, "winner");
        let won = self.publish(&ident, Some(&v1), &winner).await.unwrap();
        let loser = Self::next_metadata(&first, &v1.location, "loser");
        let error = self.publish(&ident, Some(&v1), &loser).await.unwrap_err();
        Self::assert_conflict(&error);
        let current = self.current(&ident).await.expect("published");
        assert_eq!((current.version, &current.location), (2, &won));
        assert_eq!(self.read(&won).await, winner);
        // The loser goes again from the winner's version.
        let retried = Self::next_metadata(&winner, &current.location, "loser");
        let location = self
            .publish(&ident, Some(&current), &retried)
            .await
            .unwrap();
        let current = self.current(&ident).await.expect("published");
        assert_eq!((current.version, current.location), (3, location));
    }

    async fn tables_are_listed_by_namespace(&self) {
        let namespace = self.namespace("list").await;
        let elsewhere = self.namespace("list_other").await;
        for (namespace, name) in [(&namespace, "b"), (&namespace, "a"), (&elsewhere, "c")] {
            let ident = TableIdent::new(namespace.clone(), name.to_owned());
            self.publish(&ident, None, &self.first_metadata(&ident))
                .await
                .unwrap();
        }
        let names = |tables: Vec<TableIdent>| -> Vec<String> {
            tables.iter().map(|t| t.name().to_owned()).collect()
        };
        assert_eq!(
            names(self.catalog.list_tables(&namespace).await.unwrap()),
            ["a", "b"]
        );
        assert_eq!(
            names(self.catalog.list_tables(&elsewhere).await.unwrap()),
            ["c"]
        );
        let tables = self.catalog.list_tables(&namespace).await.unwrap();
        assert!(tables.iter().all(|t| t.namespace() == &namespace));
    }

    async fn the_catalog_creates_loads_and_commits_through_the_pointer(&self) {
        let namespace = self.namespace("catalog").await;
        let creation = || {
            TableCreation::builder()
                .name("t".to_owned())
                .schema(schema())
                .build()
        };
        let created = self
            .catalog
            .create_table(&namespace, creation())
            .await
            .unwrap();
        let ident = TableIdent::new(namespace.clone(), "t".to_owned());
        assert_eq!(created.identifier(), &ident);
        assert_eq!(created.metadata().location(), self.location(&ident));
        assert!(self.catalog.table_exists(&ident).await.unwrap());
        let error = self
            .catalog
            .create_table(&namespace, creation())
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TableAlreadyExists, "{error}");

        let loaded = self.catalog.load_table(&ident).await.unwrap();
        let v1 = self.current(&ident).await.expect("created");
        assert_eq!(loaded.metadata_location(), Some(v1.location.as_str()));
        assert_eq!(loaded.metadata(), created.metadata());

        let committed = self
            .catalog
            .commit_updates(
                &ident,
                Vec::new(),
                vec![TableUpdate::SetProperties {
                    updates: HashMap::from([("k".to_owned(), "v".to_owned())]),
                }],
            )
            .await
            .unwrap();
        let v2 = self.current(&ident).await.expect("committed");
        assert_eq!(v2.version, 2);
        assert_eq!(committed.metadata_location(), Some(v2.location.as_str()));
        let loaded = self.catalog.load_table(&ident).await.unwrap();
        assert_eq!(
            loaded.metadata().properties().get("k").map(String::as_str),
            Some("v")
        );
        assert_eq!(
            loaded
                .metadata()
                .metadata_log()
                .last()
                .map(|m| &m.metadata_file),
            Some(&v1.location)
        );
        assert_eq!(self.catalog.list_tables(&namespace).await.unwrap(), [ident]);
    }
}

/// The scenario of an ambiguous swap, on a `place` whose backend applies every swap and then
/// reports it refused, as the SDK's retry of a request whose first attempt applied (and then
/// timed out, got a 5xx or lost its connection) is refused: creating a table and committing
/// to it both succeed, and the table stays readable at every step (its metadata file was
/// not deleted as a lost commit's).
pub(crate) fn ambiguous_swaps_succeed(place: Place) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let catalog = FileCatalog::at(
        place.warehouse.clone(),
        place.file_io.clone(),
        place.pointer.clone(),
    );
    runtime.block_on(async {
        let namespace = NamespaceIdent::new(format!("{}ambiguous", place.prefix));
        catalog
            .create_namespace(&namespace, HashMap::new())
            .await
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".to_owned())
            .schema(schema())
            .build();
        let created = catalog.create_table(&namespace, creation).await.unwrap();
        let ident = TableIdent::new(namespace.clone(), "t".to_owned());
        let loaded = catalog.load_table(&ident).await.unwrap();
        assert_eq!(loaded.metadata_location(), created.metadata_location());
        for round in 0..3 {
            let key = format!("round{round}");
            let committed = catalog
                .commit_updates(
                    &ident,
                    Vec::new(),
                    vec![TableUpdate::SetProperties {
                        updates: HashMap::from([(key.clone(), "yes".to_owned())]),
                    }],
                )
                .await
                .unwrap();
            let loaded = catalog.load_table(&ident).await.unwrap();
            assert_eq!(loaded.metadata_location(), committed.metadata_location());
            assert_eq!(
                loaded.metadata().properties().get(&key).map(String::as_str),
                Some("yes")
            );
        }
    });
}
