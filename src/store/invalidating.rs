//! Store decorators that keep what they learned about the store's names (listings, missing
//! names) forget it when the mount writes: every write is passed to the store below, then
//! `self.changed(key)` runs for each key or directory prefix it touched, whatever the result (a
//! refused conditional write means someone else changed the key).
//!
//! [`invalidating_store!`] writes that part of the `Store` impl, so each decorator only says
//! how it reads. A macro rather than a generic wrapper: the decorators differ in every read
//! method, and the impl must be one `#[async_trait]` block.

/// `invalidating_store! { #[attributes] impl Store for T { reads... } }`: the `Store` impl of a
/// decorator with an `inner: Arc<dyn Store>` field and the methods `changed(&self, key: &str)`,
/// `writing(&self, key: &str)`, `created(&self, key: &str, stored: Option<(&Bytes, &Version)>)`
/// and `erased(&self, key: &str, gone: bool)`. Its write methods are forwarded and followed by
/// `created` (a whole value written, which may be new; `stored`: the value and the version the
/// store gave it, if the write succeeded; `writing` is called before the write), `erased` (a
/// value removed, or a directory prefix with all below it; `gone`: if the erase succeeded) or
/// `changed` (anything else).
macro_rules! invalidating_store {
    ($(#[$attr:meta])* impl Store for $decorator:ty { $($reads:tt)* }) => {
        #[async_trait::async_trait]
        $(#[$attr])*
        impl $crate::store::Store for $decorator {
            $($reads)*

            async fn set(&self, key: &str, value: bytes::Bytes) -> $crate::store::StoreResult<$crate::store::Version> {
                let written = value.clone();
                self.writing(key);
                let result = self.inner.set(key, value).await;
                self.created(key, result.as_ref().ok().map(|version| (&written, version)));
                result
            }

            async fn set_if(
                &self,
                key: &str,
                value: bytes::Bytes,
                condition: $crate::store::Precondition,
            ) -> $crate::store::StoreResult<$crate::store::Version> {
                let written = value.clone();
                self.writing(key);
                let result = self.inner.set_if(key, value, condition).await;
                self.created(key, result.as_ref().ok().map(|version| (&written, version)));
                result
            }

            async fn set_partial_values(&self, values: &[(String, u64, bytes::Bytes)]) -> $crate::store::StoreResult<()> {
                let result = self.inner.set_partial_values(values).await;
                for (key, _, _) in values {
                    self.changed(key);
                }
                result
            }

            async fn erase(&self, key: &str) -> $crate::store::StoreResult<()> {
                let result = self.inner.erase(key).await;
                self.erased(key, result.is_ok());
                result
            }

            async fn erase_if(&self, key: &str, condition: $crate::store::Precondition) -> $crate::store::StoreResult<()> {
                let result = self.inner.erase_if(key, condition).await;
                self.erased(key, result.is_ok());
                result
            }

            async fn erase_values(&self, keys: &[String]) -> $crate::store::StoreResult<()> {
                let result = self.inner.erase_values(keys).await;
                for key in keys {
                    self.erased(key, result.is_ok());
                }
                result
            }

            /// Erased by the store below from its own listing, never from anything kept here.
            async fn erase_prefix(&self, prefix: &str) -> $crate::store::StoreResult<()> {
                let result = self.inner.erase_prefix(prefix).await;
                self.erased(prefix, result.is_ok());
                result
            }

            async fn create_dir(&self, prefix: &str) -> $crate::store::StoreResult<()> {
                let result = self.inner.create_dir(prefix).await;
                self.changed(prefix);
                result
            }

            async fn remove_dir(&self, prefix: &str) -> $crate::store::StoreResult<()> {
                let result = self.inner.remove_dir(prefix).await;
                self.erased(prefix, result.is_ok());
                result
            }

            async fn rename(&self, from: &str, to: &str) -> $crate::store::StoreResult<()> {
                let result = self.inner.rename(from, to).await;
                self.changed(from);
                self.changed(to);
                result
            }
        }
    };
}

pub(crate) use invalidating_store;
