//! Hiding the values of sensitive variables wherever they would be shown or kept.

use std::sync::Arc;

use serde_json::Value;

/// Hides the values of sensitive variables: each, wherever it occurs in a text, becomes `***`
/// — as written, line by line when it spans lines (output is streamed a line at a time), and
/// as JSON writes it (a type echoing it back escapes quotes, tabs and non-ASCII). Values
/// rendered from a sensitive variable are added as they are rendered ([`Mask::add`]): whatever
/// a template did to a secret, what it made of it is secret too.
#[derive(Debug, Clone, Default)]
pub struct Mask(Arc<std::sync::RwLock<Vec<String>>>);

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
        let mut secrets = self.0.write().expect("mask lock");
        secrets.extend(forms);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
    }

    fn secrets(&self) -> std::sync::RwLockReadGuard<'_, Vec<String>> {
        self.0.read().expect("mask lock")
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
    use super::Mask;
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
}
