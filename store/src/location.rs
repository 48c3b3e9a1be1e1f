//! Where a store lives: a local directory or a prefix in object storage.
//!
//! `--store` takes either a path (`./store`, `/data/store`, `file:///data/store`) or a URL of
//! an `object_store` scheme: `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` (also `abfs[s]://`, `adl://`) and `memory://` (for tests).
//! The layout under the prefix is the same as under a directory.
//!
//! Credentials are found the standard way of each cloud, never on the command line:
//! - S3: `AWS_*` environment variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, web identity,
//!   container credentials, instance metadata), else the shared credentials and config files
//!   (`~/.aws/credentials`, `~/.aws/config`, profile `AWS_PROFILE` or `default`).
//! - GCS: `GOOGLE_*` variables (`GOOGLE_SERVICE_ACCOUNT`, application default credentials).
//! - Azure: `AZURE_*` variables.
//!
//! A URL carrying a user name or password is refused: the URL is printed in messages and
//! logs, so a secret in it would leak.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreExt};
use object_store::path::Path as ObjectPath;
use url::Url;

/// A store's place: a directory, or a prefix in an object store.
#[derive(Clone)]
pub enum StoreLocation {
    Local(PathBuf),
    Remote(RemoteStore),
}

/// A prefix in an object store, with the client that reaches it.
#[derive(Clone)]
pub struct RemoteStore {
    /// `scheme://bucket/prefix/`, always ending in `/`; safe to print (no credentials).
    pub url: Url,
    pub store: Arc<dyn ObjectStore>,
    /// The prefix inside the bucket (no leading or trailing `/`; empty for the bucket root).
    pub prefix: ObjectPath,
}

#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    #[error("store URL {url:?}: {reason}")]
    Url { url: String, reason: String },
}

impl StoreLocation {
    /// Parses a `--store` argument: a URL with a scheme, or else a path.
    pub fn parse(text: &str) -> Result<StoreLocation, LocationError> {
        let bad = |reason: String| LocationError::Url { url: redact(text), reason };
        if !text.contains("://") {
            return Ok(StoreLocation::Local(PathBuf::from(text)));
        }
        let mut url = Url::parse(text).map_err(|e| bad(e.to_string()))?;
        if url.scheme() == "file" {
            let path = url.to_file_path().map_err(|_| bad("not a local path".into()))?;
            return Ok(StoreLocation::Local(path));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("credentials do not belong in the URL (it is printed); use the environment or a profile".into()));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("a store URL has no query or fragment".into()));
        }
        if !url.path().ends_with('/') {
            let p = format!("{}/", url.path());
            url.set_path(&p);
        }
        let store = build_store(&url).map_err(bad)?;
        let prefix = ObjectPath::from(url.path().trim_matches('/'));
        Ok(StoreLocation::Remote(RemoteStore { url, store, prefix }))
    }

    /// The local directory, if the store is one.
    pub fn local(&self) -> Option<&Path> {
        match self {
            StoreLocation::Local(p) => Some(p),
            StoreLocation::Remote(_) => None,
        }
    }

    /// The object-store client and the key of `rel`: for a directory, the local file system
    /// and the absolute path (object_store's local store renames a finished upload into place,
    /// so a file written through it appears whole, as with [`crate::AtomicFile`]).
    pub fn object(&self, rel: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath), LocationError> {
        match self {
            StoreLocation::Local(root) => {
                let abs = std::path::absolute(root.join(rel)).map_err(|e| LocationError::Url { url: root.display().to_string(), reason: e.to_string() })?;
                let key = ObjectPath::from_absolute_path(&abs).map_err(|e| LocationError::Url { url: abs.display().to_string(), reason: e.to_string() })?;
                Ok((Arc::new(object_store::local::LocalFileSystem::new()), key))
            }
            StoreLocation::Remote(r) => Ok((Arc::clone(&r.store), r.key(rel))),
        }
    }

    /// A URL or path naming `rel` (a `/`-separated path inside the store) in messages and
    /// for DataFusion's listing tables; a directory keeps a trailing `/` if `rel` has one.
    pub fn join(&self, rel: &str) -> String {
        match self {
            StoreLocation::Local(p) => {
                let joined = if rel.is_empty() { p.clone() } else { p.join(rel.trim_end_matches('/')) };
                let mut s = joined.display().to_string();
                if rel.ends_with('/') && !s.ends_with('/') {
                    s.push('/');
                }
                s
            }
            StoreLocation::Remote(r) => format!("{}{rel}", r.url),
        }
    }
}

impl RemoteStore {
    /// The object key of `rel` (a `/`-separated path inside the store).
    pub fn key(&self, rel: &str) -> ObjectPath {
        let rel = rel.trim_matches('/');
        if self.prefix.as_ref().is_empty() {
            ObjectPath::from(rel)
        } else if rel.is_empty() {
            self.prefix.clone()
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// Names of the "directories" and of the objects directly under `rel_dir`, each sorted.
    pub async fn list(&self, rel_dir: &str) -> object_store::Result<(Vec<String>, Vec<String>)> {
        let prefix = self.key(rel_dir);
        let listing = self.store.list_with_delimiter(Some(&prefix)).await?;
        let mut dirs: Vec<String> = listing.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_string)).collect();
        let mut files: Vec<String> = listing.objects.iter().filter_map(|o| o.location.filename().map(str::to_string)).collect();
        dirs.sort();
        files.sort();
        Ok((dirs, files))
    }

    /// Whether an object is stored at `rel`.
    pub async fn exists(&self, rel: &str) -> object_store::Result<bool> {
        match self.store.head(&self.key(rel)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn get(&self, rel: &str) -> object_store::Result<bytes::Bytes> {
        self.store.get(&self.key(rel)).await?.bytes().await
    }

    /// Stores `bytes` at `rel`: one PUT, or a multipart upload for a large object. Either way
    /// the object is listed only once complete, so readers never see part of it.
    pub async fn put(&self, rel: &str, bytes: Vec<u8>) -> object_store::Result<()> {
        // S3 caps a single PUT at 5 GiB, and parts can be retried one by one.
        const MULTIPART_ABOVE: usize = 64 << 20;
        const PART_SIZE: usize = 16 << 20;
        let key = self.key(rel);
        if bytes.len() <= MULTIPART_ABOVE {
            return self.store.put(&key, object_store::PutPayload::from(bytes)).await.map(|_| ());
        }
        let upload = self.store.put_multipart(&key).await?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        w.write(&bytes);
        // On error `finish` aborts the upload, so no part lingers.
        w.finish().await.map(|_| ())
    }

    /// `scheme://bucket/`: what DataFusion's object store registry is keyed by.
    pub fn bucket_url(&self) -> Url {
        let mut u = self.url.clone();
        u.set_path("/");
        u
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Local(p) => write!(f, "{}", p.display()),
            StoreLocation::Remote(r) => write!(f, "{}", r.url.as_str().trim_end_matches('/')),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the client: its configuration may hold credentials.
        write!(f, "StoreLocation({self})")
    }
}

/// `text` without anything between `://` and `@` (a would-be user and password).
fn redact(text: &str) -> String {
    match (text.find("://"), text.find('@')) {
        (Some(s), Some(a)) if a > s => format!("{}://***{}", &text[..s], &text[a..]),
        _ => text.to_string(),
    }
}

/// The client for a store URL, configured from the environment (and, for S3, the shared
/// AWS files when the environment names no key).
pub fn build_store(url: &Url) -> Result<Arc<dyn ObjectStore>, String> {
    use object_store::ObjectStoreScheme;
    if url.scheme() == "memory" {
        return Ok(memory_store(url));
    }
    let (scheme, _) = ObjectStoreScheme::parse(url).map_err(|e| e.to_string())?;
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str());
            let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            if env("AWS_ACCESS_KEY_ID").is_none()
                && let Some(p) = aws_profile::load(&env)
            {
                b = b.with_access_key_id(p.access_key_id).with_secret_access_key(p.secret_access_key);
                if let Some(t) = p.session_token {
                    b = b.with_token(t);
                }
                if env("AWS_REGION").is_none()
                    && env("AWS_DEFAULT_REGION").is_none()
                    && let Some(r) = p.region
                {
                    b = b.with_region(r);
                }
            }
            if env("AWS_REGION").is_none()
                && let Some(r) = env("AWS_DEFAULT_REGION")
            {
                b = b.with_region(r);
            }
            // A plain-HTTP endpoint (MinIO, moto, a local gateway) is meant as given.
            if env("AWS_ENDPOINT_URL").or_else(|| env("AWS_ENDPOINT")).is_some_and(|e| e.starts_with("http://")) {
                b = b.with_allow_http(true);
            }
            Arc::new(b.build().map_err(|e| e.to_string())?)
        }
        ObjectStoreScheme::GoogleCloudStorage => Arc::new(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str()).build().map_err(|e| e.to_string())?),
        ObjectStoreScheme::MicrosoftAzure => Arc::new(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str()).build().map_err(|e| e.to_string())?),
        other => return Err(format!("{other:?} URLs cannot hold a store (use s3://, gs://, az:// or a path)")),
    };
    Ok(store)
}

/// `memory://name/` stores live as long as the process and are shared by name, so that a
/// test's writer and reader see the same objects.
fn memory_store(url: &Url) -> Arc<dyn ObjectStore> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    let name = url.host_str().unwrap_or_default().to_string();
    let mut stores = STORES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(stores.entry(name).or_insert_with(|| Arc::new(object_store::memory::InMemory::new())))
}

/// The shared AWS credentials and config files, read the way the AWS CLI reads them.
mod aws_profile {
    use std::path::PathBuf;

    pub struct Profile {
        pub access_key_id: String,
        pub secret_access_key: String,
        pub session_token: Option<String>,
        pub region: Option<String>,
    }

    /// The keys of profile `AWS_PROFILE` (or `default`), if the files have them.
    pub fn load(env: &dyn Fn(&str) -> Option<String>) -> Option<Profile> {
        let home = env("HOME").map(PathBuf::from);
        let creds_file = env("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")))?;
        let config_file = env("AWS_CONFIG_FILE").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
        let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let creds = std::fs::read_to_string(creds_file).ok()?;
        let section = section_named(&creds, &profile);
        let get = |k: &str| section.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        // The config file names non-default profiles `[profile NAME]`.
        let config = config_file.and_then(|f| std::fs::read_to_string(f).ok()).unwrap_or_default();
        let config_section = if profile == "default" { section_named(&config, "default") } else { section_named(&config, &format!("profile {profile}")) };
        Some(Profile {
            access_key_id: get("aws_access_key_id")?,
            secret_access_key: get("aws_secret_access_key")?,
            session_token: get("aws_session_token"),
            region: get("region").or_else(|| config_section.into_iter().find(|(k, _)| k == "region").map(|(_, v)| v)),
        })
    }

    /// `key = value` pairs of `[name]` in an INI text.
    pub fn section_named(text: &str, name: &str) -> Vec<(String, String)> {
        let mut inside = false;
        let mut out = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                inside = header.trim() == name;
                continue;
            }
            if inside && let Some((k, v)) = line.split_once('=') {
                out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn reads_the_named_profile_and_its_region() {
            let dir = std::env::temp_dir().join(format!("gpuledger-aws-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("credentials"), "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[ci]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token = T\n").unwrap();
            std::fs::write(dir.join("config"), "[default]\nregion = eu-west-1\n[profile ci]\nregion=us-east-2\n").unwrap();
            let vars = |profile: Option<&'static str>| {
                let dir = dir.clone();
                move |k: &str| match k {
                    "AWS_SHARED_CREDENTIALS_FILE" => Some(dir.join("credentials").display().to_string()),
                    "AWS_CONFIG_FILE" => Some(dir.join("config").display().to_string()),
                    "AWS_PROFILE" => profile.map(String::from),
                    _ => None,
                }
            };
            let d = load(&vars(None)).unwrap();
            assert_eq!((d.access_key_id.as_str(), d.secret_access_key.as_str(), d.session_token, d.region.as_deref()), ("A", "B", None, Some("eu-west-1")));
            let c = load(&vars(Some("ci"))).unwrap();
            assert_eq!((c.access_key_id.as_str(), c.session_token.as_deref(), c.region.as_deref()), ("C", Some("T"), Some("us-east-2")));
            assert!(load(&vars(Some("absent"))).is_none());
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls() {
        assert_eq!(StoreLocation::parse("./store").unwrap().local(), Some(Path::new("./store")));
        assert_eq!(StoreLocation::parse("file:///data/s").unwrap().local(), Some(Path::new("/data/s")));
        let m = StoreLocation::parse("memory://t1/a/b").unwrap();
        let StoreLocation::Remote(r) = &m else { panic!("remote") };
        assert_eq!(r.url.as_str(), "memory://t1/a/b/");
        assert_eq!(r.key("gpu_samples/date=2026-10-01/x.parquet").as_ref(), "a/b/gpu_samples/date=2026-10-01/x.parquet");
        assert_eq!(m.join("ledger/"), "memory://t1/a/b/ledger/");
        assert_eq!(m.to_string(), "memory://t1/a/b");
        let root = StoreLocation::parse("memory://t2").unwrap();
        let StoreLocation::Remote(r) = &root else { panic!("remote") };
        assert_eq!(r.key("x/y").as_ref(), "x/y");
        assert_eq!(StoreLocation::parse("/s").unwrap().join("t/"), "/s/t/");
    }

    #[test]
    fn refuses_credentials_in_the_url_without_echoing_them() {
        let err = StoreLocation::parse("s3://AKIA:hunter2@bucket/p").err().unwrap().to_string();
        assert!(err.contains("credentials do not belong"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("AKIA"), "{err}");
        let err = StoreLocation::parse("ftp://host/p").err().unwrap().to_string();
        assert!(err.contains("ftp://host/p"), "{err}");
    }
}
