//! One ranged read, pinned to a version: suffix and empty ranges the service would refuse are
//! turned into bounded ranges after a HEAD (pinned to the HEAD's version), and a pinned read
//! of a replaced object is refused rather than served.

use super::*;

impl ObjectBackend {
    /// One read. With `needs_size`, the bounded range is pinned to the HEAD's version.
    pub(super) async fn get_attempt(&self, key: &str, opts: &GetOptions) -> StoreResult<Option<GetResult>> {
        let path = self.path(key)?;
        let mut range = match opts.byte_range() {
            ByteRange::Full => None,
            ByteRange::Range { length: 0, .. } => Some(GetRange::Bounded(0..0)),
            ByteRange::Range { offset, length } => Some(GetRange::Bounded(offset..offset.saturating_add(length))),
            ByteRange::From(offset) => Some(GetRange::Offset(offset)),
            ByteRange::Suffix(n) => Some(GetRange::Suffix(n)),
        };
        // Ranges the server would refuse (empty, past the end, suffixes on Azure) need the size.
        let needs_size = match &range {
            Some(GetRange::Bounded(r)) => r.is_empty(),
            Some(GetRange::Suffix(_)) => self.flavor == Flavor::Azure,
            _ => false,
        };
        let mut size_pin = None;
        if needs_size {
            let Some(meta) = self.size_of(&path, key).await? else {
                return Ok(None);
            };
            let (start, end) = opts.byte_range().resolve(meta.size);
            if start == end {
                return Ok(Some(GetResult {
                    bytes: Bytes::new(),
                    offset: start,
                    meta: self.meta_of(&meta),
                }));
            }
            range = Some(GetRange::Bounded(start..end));
            size_pin = Some(self.meta_of(&meta).version);
        }
        // Pinned: GCS reads that very generation; the others send If-Match with the ETag.
        let pin = opts.if_version.as_ref().or(size_pin.as_ref());
        let pinned = pin.map(|v| v.0.as_str()).filter(|v| !v.starts_with("m:"));
        let options = object_store::GetOptions {
            range,
            if_match: pinned.filter(|v| !v.starts_with("g:")).map(str::to_string),
            version: pinned.and_then(|v| v.strip_prefix("g:")).map(str::to_string),
            ..Default::default()
        };
        if options.range.is_some() && self.ignores_ranges.load(std::sync::atomic::Ordering::Relaxed) {
            return self.get_whole(key, &path, opts, options, pin).await;
        }
        match self.inner.get_opts(&path, options.clone()).await {
            // The server answered the range with the whole file (python's http.server does).
            Err(object_store::Error::NotSupported { source })
                if self.flavor == Flavor::Http && source.to_string().starts_with("Range request not supported") =>
            {
                let got = self.get_whole(key, &path, opts, options, pin).await?;
                // An empty file answered whole says nothing of the server: no range of it can
                // be served (nginx answers a suffix of one so), and marking the server for it
                // would read every shard whole for the rest of the mount.
                let told = got.as_ref().is_some_and(|got| got.meta.size > 0);
                if told && !self.ignores_ranges.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        source = %self.name,
                        "the server ignores Range requests: every read fetches the whole file (slow for large shards; \
                         a server that honours ranges, such as nginx or Apache, avoids it)"
                    );
                }
                Ok(got)
            }
            Ok(result) => {
                let (meta, offset) = (self.meta_of(&result.meta), result.range.start);
                if let Some(expected) = pin {
                    if *expected != meta.version {
                        return Err(StoreError::VersionMismatch {
                            key: key.to_string(),
                            expected: expected.0.clone(),
                        });
                    }
                }
                let bytes = result.bytes().await.map_err(|e| self.broken_body(key, e))?;
                Ok(Some(GetResult { bytes, offset, meta }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(object_store::Error::Precondition { .. }) => Err(StoreError::VersionMismatch {
                key: key.to_string(),
                expected: pin.map(|v| v.0.clone()).unwrap_or_default(),
            }),
            // A range that starts past the end: an empty read, as for every store.
            Err(e) if matches!(opts.range, Some(ByteRange::Range { .. } | ByteRange::From(_))) => {
                let Some(meta) = self.size_of(&path, key).await? else {
                    return Ok(None);
                };
                let (start, end) = opts.byte_range().resolve(meta.size);
                if start == end {
                    Ok(Some(GetResult {
                        bytes: Bytes::new(),
                        offset: start,
                        meta: self.meta_of(&meta),
                    }))
                } else {
                    Err(self.error(key, e))
                }
            }
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// A body that broke off after the answer began (what the client could not resume): an
    /// `UnexpectedEof`, which `get` reads again (a read is safe to repeat).
    pub(super) fn broken_body(&self, key: &str, e: object_store::Error) -> StoreError {
        match self.error(key, e) {
            StoreError::Io { key, source } => StoreError::Io {
                key,
                source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, source.to_string()),
            },
            other => other,
        }
    }

    /// A ranged read from a server that ignores ranges: the whole file, cut here.
    async fn get_whole(
        &self,
        key: &str,
        path: &Path,
        opts: &GetOptions,
        mut options: object_store::GetOptions,
        pin: Option<&Version>,
    ) -> StoreResult<Option<GetResult>> {
        options.range = None;
        let result = match self.inner.get_opts(path, options).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error(key, e)),
        };
        let meta = self.meta_of(&result.meta);
        if let Some(expected) = pin.filter(|v| **v != meta.version) {
            return Err(StoreError::VersionMismatch {
                key: key.to_string(),
                expected: expected.0.clone(),
            });
        }
        let whole = result.bytes().await.map_err(|e| self.broken_body(key, e))?;
        let (start, end) = opts.byte_range().resolve(whole.len() as u64);
        let (start, end) = (
            usize::try_from(start).unwrap_or(usize::MAX),
            usize::try_from(end).unwrap_or(usize::MAX),
        );
        let bytes = whole.slice(start.min(whole.len())..end.min(whole.len()));
        Ok(Some(GetResult {
            bytes,
            offset: start as u64,
            meta,
        }))
    }

    pub(super) async fn size_of(&self, path: &Path, key: &str) -> StoreResult<Option<object_store::ObjectMeta>> {
        match self.inner.head(path).await {
            // A generated page carries neither an ETag nor a Last-Modified, which every stored
            // file a web server serves has: a key answered so is a directory when the URL with
            // a trailing slash is its index page (python's http.server answers a directory's URL
            // with the page, after a redirect the client follows).
            Ok(meta) if self.flavor == Flavor::Http && meta.e_tag.is_none() && meta.last_modified.timestamp() == 0 => {
                if self.is_directory_page(key).await {
                    self.discovered.add_dir(format!("{key}/"));
                    Ok(None)
                } else {
                    Ok(Some(meta))
                }
            }
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            // A static web server answers HEAD of a directory with a redirect to an index page,
            // which has no object length: not a file (the directory is found by listing).
            Err(e) if self.flavor == Flavor::Http && e.to_string().contains("Content-Length") => Ok(None),
            Err(e) => Err(self.error(key, e)),
        }
    }
}
