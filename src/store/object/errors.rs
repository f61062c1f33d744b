//! object_store's errors in the store's terms: preconditions become conflicts, permission
//! stays permission; anything else names the object, leads with a credential hint when the
//! client fell back to an instance metadata service, and never repeats a secret.

use super::*;

impl ObjectBackend {
    pub(super) fn scrubbed(&self, mut message: String) -> String {
        for secret in &self.secrets {
            message = message.replace(secret.as_str(), "***");
        }
        message
    }

    pub(super) fn error(&self, key: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. } => {
                StoreError::Conflict { key: key.to_string() }
            }
            object_store::Error::NotImplemented { .. } => StoreError::Unsupported("operation on this object store"),
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                StoreError::PermissionDenied { key: key.to_string() }
            }
            other => {
                let location = if key.is_empty() {
                    self.name.clone()
                } else {
                    format!("{}/{key}", self.name.trim_end_matches('/'))
                };
                // No credentials: the client fell back to the cloud's instance metadata service,
                // whose error says nothing useful; the hint leads, the client's words follow.
                let hint = match (other.to_string().contains("169.254.169.254"), self.flavor) {
                    (false, _) | (true, Flavor::Http) => None,
                    (true, Flavor::S3) => Some("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or use --no-sign-request for public data"),
                    (true, Flavor::Gcs) => Some("no Google Cloud credentials found: set GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT), or use --no-sign-request for public data"),
                    (true, Flavor::Azure) => Some("no Azure credentials found: set AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN), or use --no-sign-request for public data"),
                };
                let message = match hint {
                    Some(hint) => format!("{hint} (asking the instance metadata service instead failed: {other})"),
                    None => other.to_string(),
                };
                StoreError::Io {
                    key: location,
                    source: std::io::Error::other(self.scrubbed(message)),
                }
            }
        }
    }
}
