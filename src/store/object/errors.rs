//! object_store's errors in the store's terms: preconditions become conflicts, permission
//! stays permission; anything else names the object, leads with a credential hint when the
//! client fell back to an instance metadata service or a TLS hint when the server's
//! certificate is not trusted, ends with the root cause (the client's own message stops at
//! "error sending request"), and never repeats a secret.

use super::*;

/// An error's message followed by its root cause, when that adds something (object_store and
/// reqwest keep the reason a request failed, such as an untrusted certificate, in the source
/// chain), led by a hint when the cause is a certificate the client does not trust.
pub(super) fn described(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut root = e.source();
    while let Some(next) = root.and_then(|r| r.source()) {
        root = Some(next);
    }
    if let Some(cause) = root.map(|r| r.to_string()) {
        if !message.contains(&cause) {
            message = format!("{message}: {cause}");
        }
    }
    if message.contains("certificate") {
        message = format!(
            "the server's TLS certificate is not trusted: trust the authority that signed it with \
             SSL_CERT_FILE=/path/to/ca.pem, or skip the check (test servers only) with \
             -o allow_invalid_certificates=true ({message})"
        );
    }
    message
}

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
                    None => described(&other),
                };
                StoreError::Io {
                    key: location,
                    source: std::io::Error::other(self.scrubbed(message)),
                }
            }
        }
    }
}
