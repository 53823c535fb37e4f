//! Hiding the values of sensitive variables wherever they would be shown or kept.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hides the values of sensitive variables: each, wherever it occurs in a text, becomes `***`
/// — as written, line by line when it spans lines (output is streamed a line at a time), and
/// as JSON writes it (a type echoing it back escapes quotes, tabs and non-ASCII). Values
/// rendered from a sensitive variable are added as they are rendered ([`Mask::add`]): whatever
/// a template did to a secret, what it made of it is secret too.
///
/// With a [`FingerprintKey`], it also tells whether a sensitive value changed without keeping
/// it ([`Mask::fingerprint`]).
#[derive(Debug, Clone, Default)]
pub struct Mask {
    secrets: Arc<std::sync::RwLock<Vec<String>>>,
    key: Arc<OnceLock<FingerprintKey>>,
}

/// The key of a deployment log's fingerprints of sensitive values: a fingerprint keyed so tells
/// whether a value changed, and to nobody without the key what it is (a plain digest of a short
/// password is undone by trying them all). Kept apart from the log: `fingerprint.key` in a
/// state directory, a Secret for the controller.
#[derive(Clone)]
pub struct FingerprintKey([u8; 32]);

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintKey(…)")
    }
}

impl FingerprintKey {
    /// A key from at least 16 bytes of secret (its SHA-256).
    pub fn from_secret(secret: &[u8]) -> Result<FingerprintKey, String> {
        if secret.len() < 16 {
            return Err(format!("a fingerprint key needs at least 16 bytes; this one has {}", secret.len()));
        }
        Ok(FingerprintKey(Sha256::digest(secret).into()))
    }

    /// The key in `path`, made (32 random bytes, readable by its owner only) when there is none.
    pub fn load_or_create(path: &Path) -> std::io::Result<FingerprintKey> {
        match std::fs::read(path) {
            Ok(secret) => return FingerprintKey::from_secret(&secret).map_err(std::io::Error::other),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            Err(_) => {}
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        file.write_all(&secret)?;
        file.sync_all()?;
        FingerprintKey::from_secret(&secret).map_err(std::io::Error::other)
    }

    fn mac(&self, bytes: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key size");
        mac.update(bytes);
        let tag = mac.finalize().into_bytes();
        tag[..12].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A line of a multi-line secret, or a value derived from one, shorter than this is not masked
/// on its own: it would hide every occurrence of something as common as `---` or `12`.
const SHORTEST_PART: usize = 4;

impl PartialEq for Mask {
    fn eq(&self, other: &Mask) -> bool {
        *self.secrets() == *other.secrets()
    }
}

impl Mask {
    /// Masks the text of every scalar inside `values` (strings; numbers and booleans as
    /// written), longest first so that a secret containing another is masked whole.
    pub fn of<'a>(values: impl Iterator<Item = &'a Value>) -> Mask {
        let mask = Mask::default();
        values.for_each(|v| mask.insert(v, 1));
        mask
    }

    /// Masks the scalars of `value` too (a value rendered from a sensitive variable); parts
    /// shorter than [`SHORTEST_PART`] are left.
    pub fn add(&self, value: &Value) {
        self.insert(value, SHORTEST_PART);
    }

    fn insert(&self, value: &Value, shortest: usize) {
        fn collect(value: &Value, into: &mut Vec<String>) {
            match value {
                Value::String(s) => into.push(s.clone()),
                Value::Number(_) | Value::Bool(_) => into.push(value.to_string()),
                Value::Array(items) => items.iter().for_each(|v| collect(v, into)),
                Value::Object(map) => map.values().for_each(|v| collect(v, into)),
                Value::Null => {}
            }
        }
        let mut found = Vec::new();
        collect(value, &mut found);
        let mut forms: Vec<String> = Vec::new();
        for secret in found.iter().filter(|s| s.chars().count() >= shortest) {
            forms.extend(written_forms(secret));
            if secret.contains('\n') {
                let lines = secret.lines().map(|l| l.trim_end_matches('\r'));
                forms.extend(lines.filter(|l| l.chars().count() >= SHORTEST_PART.max(shortest)).map(str::to_string));
            }
        }
        if forms.is_empty() {
            return;
        }
        let mut secrets = self.secrets.write().expect("mask lock");
        secrets.extend(forms);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
    }

    fn secrets(&self) -> std::sync::RwLockReadGuard<'_, Vec<String>> {
        self.secrets.read().expect("mask lock")
    }

    /// Fingerprints sensitive values with `key` from now on, in every copy (a key set already
    /// is kept).
    pub fn use_fingerprint_key(&self, key: FingerprintKey) {
        let _ = self.key.set(key);
    }

    /// The digest of inputs that may hold sensitive values: keyed with the key (a plain digest
    /// of a config that holds a short password tells the password to whoever tries them all),
    /// else [`content_hash`](super::digest::content_hash).
    pub fn digest(&self, value: &Value) -> String {
        match self.key.get() {
            Some(key) => key.mac(super::digest::canonical(value).as_bytes()),
            None => super::digest::content_hash(value),
        }
    }

    /// A keyed fingerprint of `value` (as JSON), prefixed by the key's own (`key:value`), so
    /// that fingerprints made with different keys are never compared; `None` without a key.
    pub fn fingerprint(&self, value: &Value) -> Option<String> {
        let key = self.key.get()?;
        Some(format!("{}:{}", key.mac(b"deployster fingerprint key"), key.mac(value.to_string().as_bytes())))
    }

    /// `value` with every sensitive value in its strings replaced by `***`.
    pub fn value(&self, value: &Value) -> Value {
        let secrets = self.secrets();
        mask_value(&secrets, value)
    }

    /// `text` with every sensitive value replaced by `***`.
    pub fn text(&self, text: &str) -> String {
        mask_text(&self.secrets(), text)
    }
}

fn mask_text(secrets: &[String], text: &str) -> String {
    secrets.iter().fold(text.to_string(), |text, secret| text.replace(secret.as_str(), "***"))
}

fn mask_value(secrets: &[String], value: &Value) -> Value {
    match value {
        _ if secrets.is_empty() => value.clone(),
        Value::String(text) => Value::String(mask_text(secrets, text)),
        Value::Number(_) | Value::Bool(_) if secrets.contains(&value.to_string()) => "***".into(),
        Value::Array(items) => Value::Array(items.iter().map(|v| mask_value(secrets, v)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), mask_value(secrets, v))).collect()),
        other => other.clone(),
    }
}

/// A secret as written, and as JSON writes it inside a string: escaped quotes, backslashes and
/// control characters, with non-ASCII as is (serde_json, JS, Go) and as `\uXXXX` (Python).
fn written_forms(secret: &str) -> Vec<String> {
    if secret.is_empty() {
        return Vec::new();
    }
    let quoted = serde_json::to_string(secret).expect("strings serialize");
    let escaped = quoted[1..quoted.len() - 1].to_string();
    let mut ascii = String::with_capacity(escaped.len());
    for c in escaped.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                ascii.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    // Go's encoding/json also escapes <, > and & (as \u003c, \u003e, \u0026).
    let html = ascii.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026");
    let mut forms = vec![secret.to_string(), escaped, ascii, html];
    forms.dedup();
    forms
}

#[cfg(test)]
mod tests {
    use super::{FingerprintKey, Mask};
    use serde_json::json;

    #[test]
    fn a_secret_is_masked_as_written_line_by_line_and_as_json_writes_it() {
        let pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34\r\nab\n-----END KEY-----\n";
        let mask = Mask::of([json!(pem), json!("q\"uo\teS<&>é😀"), json!(42)].iter());
        assert_eq!(mask.text(&format!("key: {pem}")), "key: ***");
        // Streamed output sees one line at a time.
        assert_eq!(mask.text("MIIBOgIBAAJBAKj34"), "***");
        assert_eq!(mask.text("ab"), "ab", "a line too short to stand for the secret");
        // As serde_json, JS and Go (HTML-safe), and Python (ASCII) write it inside a string.
        for written in [
            r#""q\"uo\teS<&>é😀""#,
            r#""q\"uo\teS\u003c\u0026\u003e\u00e9\ud83d\ude00""#,
            r#""q\"uo\teS<&>\u00e9\ud83d\ude00""#,
        ] {
            assert_eq!(mask.text(written), r#""***""#, "{written}");
        }
        assert_eq!(mask.value(&json!({"n": 42, "s": "42!"})), json!({"n": "***", "s": "***!"}));
    }

    #[test]
    fn what_a_template_made_of_a_secret_joins_the_mask_as_it_is_rendered() {
        let mask = Mask::of([json!("t0k3n")].iter());
        let copy = mask.clone();
        mask.add(&json!({"shout": "T0K3N", "flag": "no", "n": 5}));
        assert_eq!(copy.text("T0K3N t0k3n no 5"), "*** *** no 5", "shared by every copy; short parts left");
    }

    #[test]
    fn fingerprints_are_keyed_and_made_only_with_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fingerprint.key");
        let mask = Mask::default();
        assert_eq!(mask.fingerprint(&json!("hunter2")), None);
        let key = FingerprintKey::load_or_create(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        mask.clone().use_fingerprint_key(key);
        let (a, b) = (mask.fingerprint(&json!("hunter2")).unwrap(), mask.fingerprint(&json!("hunter3")).unwrap());
        assert_ne!(a, b);
        assert!(!a.contains("hunter2"));
        assert_eq!(a.split(':').next(), b.split(':').next(), "the same key's prefix");
        // The same file: the same key. Another: another.
        let again = Mask::default();
        again.use_fingerprint_key(FingerprintKey::load_or_create(&path).unwrap());
        assert_eq!(again.fingerprint(&json!("hunter2")), Some(a.clone()));
        let other = Mask::default();
        other.use_fingerprint_key(FingerprintKey::load_or_create(&dir.path().join("other.key")).unwrap());
        assert_ne!(other.fingerprint(&json!("hunter2")).unwrap().split(':').next(), a.split(':').next());
        assert!(FingerprintKey::from_secret(b"short").is_err());
    }
}
