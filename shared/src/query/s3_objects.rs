//! The data files of an Iceberg table on S3, as DataFusion reads them: an [`ObjectStore`] over
//! the table catalog's [`FileIO`] (our aws-sdk-s3 client), registered for the warehouse's
//! bucket. Reading only: `head` and ranged `get`; every write or listing is refused (the
//! landed side scans the files the table's manifests list, by name).

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use iceberg::io::FileIO;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Reads `s3://{bucket}/...` objects through a [`FileIO`].
#[derive(Debug, Clone)]
pub struct FileIoObjects {
    bucket: String,
    file_io: FileIO,
}

impl FileIoObjects {
    /// The objects of `bucket`, read through `file_io`.
    pub fn new(bucket: String, file_io: FileIO) -> Self {
        FileIoObjects { bucket, file_io }
    }

    fn uri(&self, location: &Path) -> String {
        format!("s3://{}/{}", self.bucket, location.as_ref())
    }

    fn refused(operation: &str) -> object_store::Error {
        object_store::Error::NotImplemented {
            operation: operation.to_owned(),
            implementer: "skipprd's read-only S3 lake reader".to_owned(),
        }
    }
}

fn generic(error: iceberg::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: Box::new(error),
    }
}

impl fmt::Display for FileIoObjects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileIoObjects(s3://{})", self.bucket)
    }
}

/// The byte range `range` asks for in an object of `size` bytes.
fn resolve(range: Option<&GetRange>, size: u64) -> Range<u64> {
    match range {
        None => 0..size,
        Some(GetRange::Bounded(r)) => r.start.min(size)..r.end.min(size),
        Some(GetRange::Offset(o)) => (*o).min(size)..size,
        Some(GetRange::Suffix(n)) => size.saturating_sub(*n)..size,
    }
}

#[async_trait]
impl ObjectStore for FileIoObjects {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(Self::refused("put"))
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(Self::refused("put_multipart"))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let input = self
            .file_io
            .new_input(self.uri(location))
            .map_err(generic)?;
        let size = input.metadata().await.map_err(generic)?.size;
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            size,
            e_tag: None,
            version: None,
        };
        let range = resolve(options.range.as_ref(), size);
        let payload: BoxStream<'static, object_store::Result<bytes::Bytes>> = if options.head {
            stream::empty().boxed()
        } else {
            let bytes = input
                .reader()
                .await
                .map_err(generic)?
                .read(range.clone())
                .await
                .map_err(generic)?;
            stream::once(async move { Ok(bytes) }).boxed()
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(payload),
            meta,
            range,
            attributes: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations.map(|_| Err(Self::refused("delete"))).boxed()
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::once(async { Err(Self::refused("list")) }).boxed()
    }

    async fn list_with_delimiter(
        &self,
        _prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        Err(Self::refused("list_with_delimiter"))
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(Self::refused("copy"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_clamped_to_the_object() {
        assert_eq!(resolve(None, 10), 0..10);
        assert_eq!(resolve(Some(&GetRange::Bounded(2..5)), 10), 2..5);
        assert_eq!(resolve(Some(&GetRange::Bounded(8..50)), 10), 8..10);
        assert_eq!(resolve(Some(&GetRange::Offset(4)), 10), 4..10);
        assert_eq!(resolve(Some(&GetRange::Suffix(3)), 10), 7..10);
        assert_eq!(resolve(Some(&GetRange::Suffix(30)), 10), 0..10);
    }
}
