//! What a type's image runs, read from its registry: a Pod's `command` replaces the image's
//! entrypoint (the helper goes in front of it), so the executor must know the image's own
//! entrypoint and command. Tags are resolved to a digest once per pass — every invocation of
//! a pass runs the same build — and image configs are kept per digest, so a steady drift check
//! costs one small request per image and pass, never one per invocation.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Deserialize;

/// What the executor needs of an image: where it is pinned, and what it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRun {
    /// `registry/repository@digest`: what the Pod runs.
    pub pinned: String,
    /// The image's `Entrypoint` and `Cmd` (either may be empty).
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// The image's `User`, when it names a numeric user other than root.
    pub non_root_uid: Option<i64>,
}

impl ImageRun {
    /// The program line of an invocation: `entrypoint` and `args` when the invocation names an
    /// entrypoint (an action's), else the image's entrypoint followed by `args` — or by the
    /// image's own command when there are none, as a container runtime would.
    pub fn program(&self, entrypoint: Option<&str>, args: &[String]) -> Vec<String> {
        let mut program: Vec<String> = match entrypoint {
            Some(entrypoint) => vec![entrypoint.to_string()],
            None => self.entrypoint.clone(),
        };
        match (entrypoint, args.is_empty()) {
            (None, true) => program.extend(self.cmd.iter().cloned()),
            _ => program.extend(args.iter().cloned()),
        }
        program
    }
}

/// The part of an image config (OCI image spec, `config` object) the executor reads.
#[derive(Debug, Default, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    config: Option<ImageRunConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImageRunConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
}

/// Why an image's registry could not say what the image runs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("not an image reference: {0}")]
    Reference(String),
    /// An image pull secret that is not a Docker config.
    #[error("{0}")]
    PullSecret(String),
    #[error("{0}")]
    NotFound(String),
    /// The registry wants credentials no image pull secret gives.
    #[error("{0}")]
    CredentialsMissing(String),
    #[error("{0}")]
    CredentialsRefused(String),
    /// The registry refused for another reason, or answered with an error.
    #[error("{0}")]
    Refused(String),
    #[error("its image config cannot be read: {0}")]
    Config(String),
}

impl RegistryError {
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::Reference(_) => "InvalidImageReference",
            RegistryError::PullSecret(_) => "PullSecretInvalid",
            RegistryError::NotFound(_) => "ImageNotFound",
            RegistryError::CredentialsMissing(_) => "RegistryCredentialsMissing",
            RegistryError::CredentialsRefused(_) => "RegistryCredentialsRefused",
            RegistryError::Refused(_) => "RegistryRefused",
            RegistryError::Config(_) => "ImageConfigInvalid",
        }
    }
}

/// Credentials for registries, by host (from `kubernetes.io/dockerconfigjson` Secrets).
pub type Credentials = HashMap<String, (String, String)>;

/// Reads `.dockerconfigjson` (`{"auths": {"host": {"auth": base64(user:pass)} | {"username",
/// "password"}}}`) into `credentials`; hosts already there are kept.
pub fn read_docker_config(json: &[u8], credentials: &mut Credentials) -> Result<(), RegistryError> {
    use base64::Engine;
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        auths: HashMap<String, AuthEntry>,
    }
    #[derive(Deserialize)]
    struct AuthEntry {
        username: Option<String>,
        password: Option<String>,
        auth: Option<String>,
    }
    let invalid = RegistryError::PullSecret;
    let file: File = serde_json::from_slice(json).map_err(|e| invalid(format!("not a Docker config: {e}")))?;
    for (host, entry) in file.auths {
        let pair = match (entry.username, entry.password, entry.auth) {
            (Some(user), Some(password), _) => (user, password),
            (_, _, Some(auth)) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|_| invalid(format!("the `auth` of {host} is not base64")))?;
                let text =
                    String::from_utf8(decoded).map_err(|_| invalid(format!("the `auth` of {host} is not text")))?;
                let (user, password) = text
                    .split_once(':')
                    .ok_or_else(|| invalid(format!("the `auth` of {host} is not user:password")))?;
                (user.to_string(), password.to_string())
            }
            _ => continue,
        };
        let host = host.trim_start_matches("https://").trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host).to_string();
        credentials.entry(host).or_insert(pair);
    }
    Ok(())
}

/// Where a registry is read, when its name is not how it is reached from here: a registry the
/// nodes pull from at a name the controller's own Pod cannot use (a node-local registry on
/// `127.0.0.1`, an air-gapped mirror, a pull-through cache). Given as `NAME=URL`
/// (`127.0.0.1:5000=http://10.244.0.1:5000`), as containerd's registry hosts configuration
/// maps names to endpoints on nodes. Only where the config is *read* changes: Pods still name
/// the image by `NAME`, which is what their node pulls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The registry as image references name it (`host[:port]`).
    pub name: String,
    /// Where it is read instead (`host[:port]`).
    pub host: String,
    /// `http://`: spoken to over plain HTTP.
    pub plain_http: bool,
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (name, url) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not NAME=URL (127.0.0.1:5000=http://10.0.0.5:5000)"))?;
        let (plain_http, rest) = match url.split_once("://") {
            Some(("http", rest)) => (true, rest),
            Some(("https", rest)) => (false, rest),
            _ => return Err(format!("`{url}` is not an http:// or https:// URL (in `{text}`)")),
        };
        let host = rest.trim_end_matches('/');
        if name.is_empty() || name.contains('/') || host.is_empty() || host.contains('/') {
            return Err(format!("`{text}`: the registry and the endpoint are each a host[:port], with no path"));
        }
        Ok(Endpoint { name: name.to_string(), host: host.to_string(), plain_http })
    }
}

/// Reads images' configs from their registries, keeping what it learnt.
pub struct Registry {
    client: Client,
    /// For registries on this machine, which speak plain HTTP, and `http://` endpoints.
    loopback: Client,
    /// By registry name.
    endpoints: HashMap<String, Endpoint>,
    /// Digest → what the image runs.
    configs: Mutex<HashMap<String, Arc<ImageRun>>>,
    /// (pass, image) → what it resolved to in that pass.
    resolved: Mutex<lru::LruCache<(String, String), Arc<ImageRun>>>,
}

impl Registry {
    /// A client speaking HTTPS, except to `insecure` registries (`host:port`) and loopback ones,
    /// which it speaks plain HTTP to (as a container runtime does by default); registries named
    /// in `endpoints` are read there.
    pub fn new(insecure: &[String], endpoints: &[Endpoint]) -> Registry {
        crate::client::install_crypto();
        let config = |protocol| ClientConfig {
            protocol,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            ..ClientConfig::default()
        };
        Registry {
            client: Client::new(config(ClientProtocol::HttpsExcept(insecure.to_vec()))),
            loopback: Client::new(config(ClientProtocol::Http)),
            endpoints: endpoints.iter().map(|e| (e.name.clone(), e.clone())).collect(),
            configs: Mutex::default(),
            resolved: Mutex::new(lru::LruCache::new(NonZeroUsize::new(4096).expect("non-zero"))),
        }
    }

    /// What `image` runs in pass `pass`: its tag resolved to a digest on the pass's first
    /// use, its config read once per digest.
    pub async fn resolve(
        &self,
        image: &str,
        pass: &str,
        credentials: &Credentials,
    ) -> Result<Arc<ImageRun>, RegistryError> {
        let key = (pass.to_string(), image.to_string());
        if let Some(known) = self.resolved.lock().expect("registry lock").get(&key) {
            return Ok(known.clone());
        }
        let reference: Reference = image.parse().map_err(|e| RegistryError::Reference(format!("{e}")))?;
        let auth = match credentials.get(reference.resolve_registry()).or_else(|| credentials.get(reference.registry()))
        {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        let (read_at, client) = self.read_at(&reference);
        let digest = match reference.digest() {
            Some(digest) => digest.to_string(),
            None => client.fetch_manifest_digest(&read_at, &auth).await.map_err(|e| describe(&e, &auth))?,
        };
        let known = self.configs.lock().expect("registry lock").get(&digest).cloned();
        let run = match known {
            Some(run) => run,
            None => {
                let (_, _, config) =
                    client.pull_manifest_and_config(&read_at, &auth).await.map_err(|e| describe(&e, &auth))?;
                let file: ConfigFile =
                    serde_json::from_str(&config).map_err(|e| RegistryError::Config(e.to_string()))?;
                let config = file.config.unwrap_or_default();
                let pinned = format!("{}/{}@{digest}", reference.registry(), reference.repository());
                let non_root_uid = config
                    .user
                    .as_deref()
                    .and_then(|u| u.split(':').next())
                    .and_then(|u| u.parse::<i64>().ok())
                    .filter(|uid| *uid != 0);
                let run = Arc::new(ImageRun {
                    pinned,
                    entrypoint: config.entrypoint.unwrap_or_default(),
                    cmd: config.cmd.unwrap_or_default(),
                    non_root_uid,
                });
                self.configs.lock().expect("registry lock").insert(digest, run.clone());
                run
            }
        };
        self.resolved.lock().expect("registry lock").put(key, run.clone());
        Ok(run)
    }
}

impl Registry {
    /// Where `reference` is read (its registry's endpoint, if one is given), and with which
    /// client.
    fn read_at(&self, reference: &Reference) -> (Reference, &Client) {
        if let Some(endpoint) = self.endpoints.get(reference.registry()) {
            let (registry, repository) = (endpoint.host.clone(), reference.repository().to_string());
            let moved = match (reference.tag(), reference.digest()) {
                (_, Some(digest)) => Reference::with_digest(registry, repository, digest.to_string()),
                (tag, None) => Reference::with_tag(registry, repository, tag.unwrap_or("latest").to_string()),
            };
            return (moved, if endpoint.plain_http { &self.loopback } else { &self.client });
        }
        let host = reference.registry().rsplit_once(':').map_or(reference.registry(), |(host, _)| host);
        let client = match host {
            "localhost" | "[::1]" => &self.loopback,
            host if host.starts_with("127.") => &self.loopback,
            _ => &self.client,
        };
        (reference.clone(), client)
    }
}

/// The registry's answer, in a sentence.
fn describe(error: &oci_client::errors::OciDistributionError, auth: &RegistryAuth) -> RegistryError {
    use oci_client::errors::OciDistributionError as E;
    match error {
        E::ImageManifestNotFoundError(_) => {
            RegistryError::NotFound("the registry has no such image (manifest unknown)".into())
        }
        E::AuthenticationFailure(m) => {
            RegistryError::CredentialsRefused(format!("the registry refused the credentials: {m}"))
        }
        E::UnauthorizedError { url } if matches!(auth, RegistryAuth::Anonymous) => RegistryError::CredentialsMissing(
            format!("the registry requires credentials it was not given: no image pull secret names it ({url})"),
        ),
        E::UnauthorizedError { url } => {
            RegistryError::CredentialsRefused(format!("the registry refused the credentials it was given ({url})"))
        }
        E::RegistryError { envelope, .. } => {
            let said: Vec<String> = envelope.errors.iter().map(|e| format!("{:?}: {}", e.code, e.message)).collect();
            let unknown = envelope.errors.iter().any(|e| {
                matches!(
                    e.code,
                    oci_client::errors::OciErrorCode::ManifestUnknown | oci_client::errors::OciErrorCode::NameUnknown
                )
            });
            match unknown {
                true => RegistryError::NotFound(format!("the registry has no such image ({})", said.join("; "))),
                false => RegistryError::Refused(format!("the registry refused ({})", said.join("; "))),
            }
        }
        E::ServerError { code, message, .. } => {
            RegistryError::Refused(format!("the registry answered HTTP {code}: {message}"))
        }
        other => RegistryError::Refused(format!("the registry answered: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(entrypoint: &[&str], cmd: &[&str]) -> ImageRun {
        ImageRun {
            pinned: "r/x@sha256:0".into(),
            entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            non_root_uid: None,
        }
    }

    #[test]
    fn a_registry_is_read_at_its_endpoint_and_still_named_by_its_name() {
        let endpoint: Endpoint = "127.0.0.1:5000=http://10.244.0.1:5000/".parse().unwrap();
        assert_eq!(
            endpoint,
            Endpoint { name: "127.0.0.1:5000".into(), host: "10.244.0.1:5000".into(), plain_http: true }
        );
        let registry = Registry::new(&[], &[endpoint, "mirror.example=https://cache.internal:8443".parse().unwrap()]);
        let (read_at, client) = registry.read_at(&"127.0.0.1:5000/team/type:1".parse().unwrap());
        assert_eq!(read_at.whole(), "10.244.0.1:5000/team/type:1");
        assert!(std::ptr::eq(client, &registry.loopback), "http:// is plain HTTP");
        let pinned: Reference =
            "mirror.example/t@sha256:0123456789012345678901234567890123456789012345678901234567890123".parse().unwrap();
        let (read_at, client) = registry.read_at(&pinned);
        assert_eq!(read_at.registry(), "cache.internal:8443");
        assert_eq!(read_at.digest(), pinned.digest());
        assert!(std::ptr::eq(client, &registry.client));
        let (read_at, _) = registry.read_at(&"other.example/t:2".parse().unwrap());
        assert_eq!(read_at.whole(), "other.example/t:2", "other registries are read where they are named");

        for bad in ["127.0.0.1:5000", "r=10.0.0.1:5000", "r=ftp://x", "r=http://x/path", "=http://x"] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn the_program_line_is_what_a_container_runtime_would_run() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let image = run(&["/type"], &["--default"]);
        assert_eq!(image.program(None, &[]), args(&["/type", "--default"]), "init: entrypoint and command");
        assert_eq!(image.program(None, &args(&["state"])), args(&["/type", "state"]), "args replace the command");
        assert_eq!(image.program(Some("/other"), &args(&["go"])), args(&["/other", "go"]), "an action's entrypoint");
        assert_eq!(image.program(Some("/other"), &[]), args(&["/other"]), "no image command after an entrypoint");
        assert_eq!(run(&[], &["/bin/sh", "-c", "x"]).program(None, &[]), args(&["/bin/sh", "-c", "x"]));
    }

    /// A registry on loopback that refuses every request as one needing credentials does.
    async fn refusing_registry() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let body = r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;
                let response = format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"test\"\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        address
    }

    /// A registry that refuses (no pull secret, or a wrong one) is a failure saying so, at once.
    #[tokio::test]
    async fn a_registry_that_refuses_is_a_clear_error() {
        let address = refusing_registry().await;
        let registry = Registry::new(&[], &[]);
        let image = format!("{address}/team/app:1");
        let anonymous = registry.resolve(&image, "pass", &Credentials::new()).await.unwrap_err();
        assert_eq!(anonymous.reason(), "RegistryCredentialsMissing");
        let anonymous = anonymous.to_string();
        assert!(anonymous.starts_with("the registry requires credentials it was not given"), "{anonymous}");
        assert!(anonymous.contains("/team/app/manifests/1"), "it names what was asked: {anonymous}");
        let mut credentials = Credentials::new();
        credentials.insert(address.clone(), ("user".into(), "wrong".into()));
        let wrong = registry.resolve(&image, "pass", &credentials).await.unwrap_err();
        assert_eq!(wrong.reason(), "RegistryCredentialsRefused");
        let wrong = wrong.to_string();
        assert!(wrong.starts_with("the registry refused the credentials it was given"), "{wrong}");
    }

    #[test]
    fn docker_configs_give_credentials_by_host() {
        let mut credentials = Credentials::new();
        let json = br#"{"auths": {
            "https://registry.example:5000/v1/": {"auth": "dXNlcjpwYXNzOndvcmQ="},
            "other.example": {"username": "u", "password": "p"},
            "token-only.example": {"identitytoken": "t"}
        }}"#;
        read_docker_config(json, &mut credentials).unwrap();
        assert_eq!(credentials["registry.example:5000"], ("user".to_string(), "pass:word".to_string()));
        assert_eq!(credentials["other.example"], ("u".to_string(), "p".to_string()));
        assert!(!credentials.contains_key("token-only.example"));
        let err = read_docker_config(br#"{"auths": {"x": {"auth": "bm9jb2xvbg=="}}}"#, &mut credentials).unwrap_err();
        assert_eq!(err.reason(), "PullSecretInvalid");
        assert!(err.to_string().contains("not user:password"), "{err}");
        let err = read_docker_config(b"\"text\"", &mut credentials).unwrap_err();
        assert!(err.to_string().contains("not a Docker config"), "{err}");
    }
}
