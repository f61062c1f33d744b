//! Building an object-store backend from a source URL.
//!
//! Each service's builder starts from its standard environment (`AWS_*`, `AZURE_*`,
//! `GOOGLE_*`), then the URL, then the explicit flags (`--endpoint-url`, `--region`,
//! `--no-sign-request`) and `-o key=value` options in `object_store`'s own vocabulary. Unknown
//! option keys are errors, not silently ignored. Requests get bounded timeouts and a short
//! retry budget, so an unreachable endpoint fails in seconds, and a bounded number run at once.
//! `STORAGE_EMULATOR_HOST` points GCS at an emulator, as Google's own clients do. Every client
//! sends through a counting connector (`transport`), so retries show in the mount's counters.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::client::HttpConnector;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::limit::LimitStore;
use object_store::{ClientConfigKey, ClientOptions, ObjectStore, RetryConfig};
use url::Url;

use super::object::http_listing::IndexPages;
use super::object::{Flavor, ObjectBackend};
use super::transport::{CountingConnector, WireStats};

/// Requests in flight at once per mount.
const MAX_CONCURRENT_REQUESTS: usize = 64;

/// A remote source and how to reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteOptions {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub no_sign_request: bool,
    /// `-o key=value` pairs, passed to the service's builder.
    pub options: Vec<(String, String)>,
}

/// The schemes this module opens.
pub fn is_remote_url(source: &str) -> bool {
    let scheme = source.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(
        scheme.as_deref(),
        Some("s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss" | "adl" | "http" | "https")
    )
}

/// Plain HTTP(S) sources (read-only; listings from the server's index pages).
pub fn is_http_url(source: &str) -> bool {
    let scheme = source.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(scheme.as_deref(), Some("http" | "https"))
}

/// Retries of one request, and the time within which they may happen.
const MAX_RETRIES: usize = 4;
const RETRY_BUDGET: Duration = Duration::from_secs(30);

fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_BUDGET,
        ..Default::default()
    }
}

/// Client settings every backend gets unless `-o` says otherwise.
const CLIENT_DEFAULTS: [(&str, &str); 2] = [("timeout", "60s"), ("connect_timeout", "5s")];

fn bad_option(key: &str, service: &str) -> String {
    format!("-o {key}=…: not an option of the {service} client (see the object_store crate's configuration keys)")
}

/// Open the backend a URL names. Errors are messages for the user.
pub fn open(source: &str, opts: &RemoteOptions, writable: bool) -> Result<ObjectBackend, String> {
    let shown = redact_url(source);
    let url = Url::parse(source).map_err(|e| format!("{shown}: not a valid URL: {e}"))?;
    let scheme = url.scheme().to_ascii_lowercase();
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{shown}: the URL names no bucket, container or host"));
    }
    let prefix = url.path().trim_matches('/').to_string();
    let wire = Arc::new(WireStats::new(MAX_RETRIES, RETRY_BUDGET));
    let connector = || CountingConnector::new(wire.clone());
    let (store, flavor): (Arc<dyn ObjectStore>, Flavor) = match scheme.as_str() {
        "s3" | "s3a" => (Arc::new(s3(&url, opts, connector())?), Flavor::S3),
        "gs" => (Arc::new(gcs(&url, opts, connector())?), Flavor::Gcs),
        "az" | "azure" | "abfs" | "abfss" | "adl" => (Arc::new(azure(&url, opts, connector())?), Flavor::Azure),
        "http" | "https" => (Arc::new(http(&url, opts, connector())?), Flavor::Http),
        other => return Err(format!("{shown}: unsupported scheme {other}://")),
    };
    let limited: Arc<dyn ObjectStore> = Arc::new(LimitStore::new(store, MAX_CONCURRENT_REQUESTS));
    let mut backend = ObjectBackend::new(limited, &prefix, flavor, writable, shown)
        .with_wire_stats(wire.clone())
        .with_secrets(secrets(&url, opts));
    if flavor == Flavor::Http {
        backend = backend.with_index_pages(index_pages(&url, opts, connector())?);
    }
    Ok(backend)
}

/// A URL without the user name and password it may carry (`https://user:secret@host/x`), for
/// messages, logs and the mount table.
pub fn redact_url(source: &str) -> String {
    match Url::parse(source) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        _ => source.to_string(),
    }
}

/// What must never appear in a message: the URL's password (as written and decoded) and the
/// values of secret-looking `-o` keys.
fn secrets(url: &Url, opts: &RemoteOptions) -> Vec<String> {
    const SECRET_WORDS: [&str; 6] = ["secret", "key", "token", "password", "sas", "credential"];
    let mut out: Vec<String> = url.password().into_iter().map(str::to_string).collect();
    if let Some(p) = url.password() {
        out.push(percent_decode(p));
    }
    for (k, v) in &opts.options {
        let k = k.to_ascii_lowercase();
        if SECRET_WORDS.iter().any(|w| k.contains(w)) && v.len() >= 4 {
            out.push(v.clone());
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map_or_else(|| s.to_string(), |(_, v)| v.into_owned())
}

/// The URL's bucket/container with no path: what builders parse.
fn root_url(url: &Url) -> String {
    format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default())
}

fn options(opts: &RemoteOptions) -> impl Iterator<Item = (&str, &str)> {
    CLIENT_DEFAULTS
        .into_iter()
        .chain(opts.options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn s3(url: &Url, opts: &RemoteOptions, connector: CountingConnector) -> Result<object_store::aws::AmazonS3, String> {
    let mut b = AmazonS3Builder::from_env()
        .with_url(root_url(url))
        .with_retry(retry())
        .with_http_connector(connector);
    for (k, v) in options(opts) {
        let key: AmazonS3ConfigKey = k.parse().map_err(|_| bad_option(k, "S3"))?;
        b = b.with_config(key, v);
    }
    if let Some(endpoint) = &opts.endpoint {
        b = b
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    if let Some(region) = &opts.region {
        b = b.with_region(region);
    }
    if opts.no_sign_request {
        b = b.with_skip_signature(true);
    }
    b.build().map_err(|e| format!("S3: {e}"))
}

fn gcs(
    url: &Url,
    opts: &RemoteOptions,
    connector: CountingConnector,
) -> Result<object_store::gcp::GoogleCloudStorage, String> {
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_url(root_url(url))
        .with_retry(retry())
        .with_http_connector(connector);
    let emulator = std::env::var("STORAGE_EMULATOR_HOST").ok().filter(|h| !h.is_empty());
    let base = opts.endpoint.clone().or_else(|| {
        emulator.as_ref().map(|h| {
            if h.contains("://") {
                h.clone()
            } else {
                format!("http://{h}")
            }
        })
    });
    if let Some(base) = base {
        b = b
            .with_config(GoogleConfigKey::BaseUrl, base.trim_end_matches('/'))
            .with_config(GoogleConfigKey::Client(ClientConfigKey::AllowHttp), "true")
            .with_skip_signature(emulator.is_some() || opts.no_sign_request);
    }
    for (k, v) in options(opts) {
        let key: GoogleConfigKey = k.parse().map_err(|_| bad_option(k, "GCS"))?;
        b = b.with_config(key, v);
    }
    let has_account = [GoogleConfigKey::ServiceAccount, GoogleConfigKey::ServiceAccountKey]
        .iter()
        .any(|k| b.get_config_value(k).is_some_and(|v| !v.is_empty()));
    if (opts.no_sign_request || emulator.is_some()) && !has_account {
        // Anonymous: object_store's GCS client takes "no OAuth" from a service account key
        // (skipping signatures alone still fetches a token).
        let key =
            serde_json::json!({"private_key": "", "private_key_id": "", "client_email": "", "disable_oauth": true});
        b = b.with_skip_signature(true).with_service_account_key(key.to_string());
    }
    b.build().map_err(|e| format!("GCS: {e}"))
}

fn azure(
    url: &Url,
    opts: &RemoteOptions,
    connector: CountingConnector,
) -> Result<object_store::azure::MicrosoftAzure, String> {
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_url(url.as_str())
        .with_retry(retry())
        .with_http_connector(connector);
    for (k, v) in options(opts) {
        let key: AzureConfigKey = k.parse().map_err(|_| bad_option(k, "Azure"))?;
        b = b.with_config(key, v);
    }
    if let Some(endpoint) = &opts.endpoint {
        b = b
            .with_endpoint(endpoint.clone())
            .with_allow_http(endpoint.starts_with("http://"));
    }
    if opts.no_sign_request {
        b = b.with_skip_signature(true);
    }
    b.build().map_err(|e| match e.to_string() {
        m if m.contains("Account must be specified") => format!(
            "{url}: no Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME (or pass -o \
             azure_storage_account_name=ACCOUNT), with AZURE_STORAGE_ACCOUNT_KEY for private data"
        ),
        m => format!("Azure: {m}"),
    })
}

fn http(
    url: &Url,
    opts: &RemoteOptions,
    connector: CountingConnector,
) -> Result<object_store::http::HttpStore, String> {
    let base = &url[..url::Position::BeforePath];
    let mut b = HttpBuilder::new()
        .with_url(base)
        .with_retry(retry())
        .with_http_connector(connector);
    for (k, v) in options(opts) {
        let key: ClientConfigKey = k.parse().map_err(|_| bad_option(k, "HTTP"))?;
        b = b.with_config(key, v);
    }
    b = b.with_config(ClientConfigKey::AllowHttp, "true");
    b.build().map_err(|e| format!("HTTP: {e}"))
}

/// The client that reads directory index pages of an HTTP source (see `object::http_listing`),
/// configured like the store's own.
fn index_pages(url: &Url, opts: &RemoteOptions, connector: CountingConnector) -> Result<IndexPages, String> {
    let mut client_options = ClientOptions::new().with_allow_http(true);
    for (k, v) in options(opts) {
        let key: ClientConfigKey = k.parse().map_err(|_| bad_option(k, "HTTP"))?;
        client_options = client_options.with_config(key, v);
    }
    let client = connector.connect(&client_options).map_err(|e| format!("HTTP: {e}"))?;
    let mut base = url.clone();
    base.set_path("/");
    base.set_query(None);
    base.set_fragment(None);
    Ok(IndexPages::new(client, base, MAX_RETRIES, RETRY_BUDGET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_options() {
        assert!(is_remote_url("s3://b/x") && is_remote_url("gs://b") && is_remote_url("https://h/p"));
        assert!(!is_remote_url("/data/x.zarr") && !is_remote_url("file:///x"));
        let o = RemoteOptions {
            endpoint: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        };
        assert!(open("s3://bucket/a/b.zarr", &o, true).is_ok());
        assert!(open("s3://", &o, true).unwrap_err().contains("no bucket"));
        assert!(open("ftp://x/y", &o, true).unwrap_err().contains("unsupported"));
        let bad = RemoteOptions {
            options: vec![("no_such_key".into(), "1".into())],
            ..o
        };
        assert!(open("s3://bucket", &bad, true).unwrap_err().contains("no_such_key"));
        let http = open("http://127.0.0.1:9/some/prefix", &RemoteOptions::default(), true).unwrap();
        assert!(!crate::store::Store::capabilities(&http).writable);
    }
}
