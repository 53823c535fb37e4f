//! Resource type references: `builtin/<name>`, a local program path, or a Docker image.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;

/// Built-in resource types carried by the deployster binary.
pub const BUILTIN_TYPES: &[&str] = &["directory", "file", "package", "kubernetes"];

/// What runs a resource type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TypeRef {
    /// A type implemented by the deployster binary itself, run as a sub-process.
    Builtin(String),
    /// A local program, as an absolute path.
    Local(PathBuf),
    /// A Docker image.
    Image(ImageRef),
}

/// Why a `type` (or an action's `image`) names no type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeRefError {
    #[error("unknown built-in type `{text}`{hint} (known: {})", builtin_list())]
    UnknownBuiltin { text: String, hint: String },
    #[error(
        "unknown type `{text}` (did you mean `builtin/{meant}`?): it would be taken for a Docker image and pulled \
         from Docker Hub; if that is what you mean, name its registry: `docker.io/{text}`"
    )]
    MisspeltBuiltin { text: String, meant: String },
    #[error(
        "`{0}` is not a valid type: expected builtin/<name>, a local program path (./x, ../x, /x) or a Docker image \
         reference ([registry[:port]/]name[:tag][@digest])"
    )]
    NotAType(String),
    #[error("`{0}`: repository names must be lowercase")]
    UppercaseRepository(String),
}

impl TypeRef {
    /// Parses a `type` (or an action's `image`). Relative local paths resolve against `base`.
    pub fn parse(text: &str, base: &Path) -> Result<TypeRef, TypeRefError> {
        if let Some(name) = text.strip_prefix("builtin/") {
            return if BUILTIN_TYPES.contains(&name) {
                Ok(TypeRef::Builtin(name.to_string()))
            } else {
                let hint = closest_builtin(name).map(|b| format!(" (did you mean `builtin/{b}`?)")).unwrap_or_default();
                Err(TypeRefError::UnknownBuiltin { text: text.to_string(), hint })
            };
        }
        if text.starts_with("./") || text.starts_with("../") || text.starts_with('/') {
            return Ok(TypeRef::Local(normalize(&base.join(text))));
        }
        // `bulitin/file` is a valid image name, which would be looked for on Docker Hub: a
        // first part a slip away from `builtin`, followed by a built-in's name, is taken for the
        // typo it surely is, before any registry is asked. An image so named is still reachable
        // by naming its registry (`docker.io/bulitin/file`).
        if let Some((first, rest)) = text.split_once('/')
            && first != "builtin"
            && strsim::osa_distance(first, "builtin") <= 2
            && let Some(meant) = closest_builtin(rest)
        {
            return Err(TypeRefError::MisspeltBuiltin { text: text.to_string(), meant: meant.to_string() });
        }
        ImageRef::parse(text).map(TypeRef::Image)
    }

    /// A built-in that does nothing but read and write files (`builtin/directory`,
    /// `builtin/file`): in a cluster, where the machine deployster runs on is no place to write
    /// anything, its state and actions run in a Pod on its `files` plug.
    pub fn is_file_builtin(&self) -> bool {
        matches!(self, TypeRef::Builtin(name) if name == "directory" || name == "file")
    }

    /// Whether the program sees host paths (local processes) or its own filesystem (containers).
    pub fn sees_host_paths(&self) -> bool {
        !matches!(self, TypeRef::Image(_))
    }
}

impl fmt::Display for TypeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeRef::Builtin(name) => write!(f, "builtin/{name}"),
            TypeRef::Local(path) => write!(f, "{}", path.display()),
            TypeRef::Image(image) => write!(f, "{image}"),
        }
    }
}

fn builtin_list() -> String {
    BUILTIN_TYPES.iter().map(|t| format!("builtin/{t}")).collect::<Vec<_>>().join(", ")
}

/// The built-in type `name` is or was likely meant as.
fn closest_builtin(name: &str) -> Option<&'static str> {
    let exact = BUILTIN_TYPES.iter().find(|b| **b == name).copied();
    exact.or_else(|| super::suggest::closest(name, BUILTIN_TYPES.iter().copied()))
}

/// Makes `path` absolute and removes `.` and `..` components without touching the filesystem
/// (the path may not exist yet; existence is checked later with a clearer message).
pub fn normalize(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A Docker image reference: `[registry[:port]/]repository[:tag][@digest]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    pub registry: Option<String>,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

fn reference_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
        let domain = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?";
        let tag = r"[\w][\w.-]{0,127}";
        let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
        Regex::new(&format!(
            r"^(?:(?P<registry>{domain})/)?(?P<repo>{component}(?:/{component})*)(?::(?P<tag>{tag}))?(?:@(?P<digest>{digest}))?$"
        ))
        .expect("the image reference pattern is valid")
    })
}

impl ImageRef {
    pub fn parse(text: &str) -> Result<ImageRef, TypeRefError> {
        let caps = reference_regex().captures(text).ok_or_else(|| TypeRefError::NotAType(text.to_string()))?;
        let mut registry = caps.name("registry").map(|m| m.as_str().to_string());
        let mut repository = caps["repo"].to_string();
        // A first component without `.`, `:` or `localhost` is a path component, not a registry
        // (`acme/vm` is repository `acme/vm` on the default registry).
        if let Some(r) = &registry
            && !(r.contains('.') || r.contains(':') || r == "localhost")
        {
            if r.chars().any(|c| c.is_ascii_uppercase()) {
                return Err(TypeRefError::UppercaseRepository(text.to_string()));
            }
            repository = format!("{r}/{repository}");
            registry = None;
        }
        Ok(ImageRef {
            registry,
            repository,
            tag: caps.name("tag").map(|m| m.as_str().to_string()),
            digest: caps.name("digest").map(|m| m.as_str().to_string()),
        })
    }

    /// Whether `expected` (a type from a `required_resources` declaration) names this image:
    /// equal, or the same repository when `expected` pins no tag or digest.
    pub fn satisfies(&self, expected: &ImageRef) -> bool {
        self.registry == expected.registry
            && self.repository == expected.repository
            && (expected.tag.is_none() || expected.tag == self.tag)
            && (expected.digest.is_none() || expected.digest == self.digest)
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(registry) = &self.registry {
            write!(f, "{registry}/")?;
        }
        write!(f, "{}", self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Whether a dependency of type `actual` satisfies a `required_resources` entry `expected`.
pub fn type_satisfies(actual: &TypeRef, expected: &str, base: &Path) -> bool {
    match (actual, TypeRef::parse(expected, base)) {
        (TypeRef::Image(a), Ok(TypeRef::Image(e))) => a.satisfies(&e),
        (a, Ok(e)) => *a == e,
        (_, Err(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(text: &str) -> ImageRef {
        ImageRef::parse(text).unwrap()
    }

    #[test]
    fn image_references_with_registry_port_tag_and_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let r = image(&format!("registry.local:5000/team/vm:1.2@{digest}"));
        assert_eq!(r.registry.as_deref(), Some("registry.local:5000"));
        assert_eq!(r.repository, "team/vm");
        assert_eq!(r.tag.as_deref(), Some("1.2"));
        assert_eq!(r.digest.as_deref(), Some(digest.as_str()));
        assert_eq!(r.to_string(), format!("registry.local:5000/team/vm:1.2@{digest}"));

        let r = image("acme/deployster-gcp-vm:1.2");
        assert_eq!((r.registry, r.repository.as_str()), (None, "acme/deployster-gcp-vm"));
        let r = image("localhost/x");
        assert_eq!(r.registry.as_deref(), Some("localhost"));
        let r = image(&format!("busybox@{digest}"));
        assert_eq!((r.tag, r.digest.is_some()), (None, true));
    }

    #[test]
    fn invalid_references_are_rejected() {
        for bad in ["", "Acme/vm", "acme//vm", "acme/vm:", "acme/vm@sha256:xyz", "vm:-bad", "has space"] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn type_kinds() {
        let base = Path::new("/work/m");
        assert_eq!(TypeRef::parse("builtin/file", base).unwrap(), TypeRef::Builtin("file".into()));
        assert!(TypeRef::parse("builtin/nope", base).unwrap_err().to_string().contains("builtin/directory"));
        let misspelt = TypeRef::parse("builtin/fiel", base).unwrap_err().to_string();
        assert!(
            misspelt.starts_with("unknown built-in type `builtin/fiel` (did you mean `builtin/file`?)"),
            "{misspelt}"
        );
        // A misspelt `builtin/` is not an image to pull.
        for (typo, meant) in [("bulitin/file", "builtin/file"), ("biultin/kubernetes", "builtin/kubernetes")] {
            let err = TypeRef::parse(typo, base).unwrap_err().to_string();
            assert!(err.starts_with(&format!("unknown type `{typo}` (did you mean `{meant}`?)")), "{err}");
            assert!(err.contains(&format!("`docker.io/{typo}`")), "{err}");
            assert!(matches!(TypeRef::parse(&format!("docker.io/{typo}"), base), Ok(TypeRef::Image(_))));
        }
        // Images whose first part is merely a word are images.
        assert!(matches!(TypeRef::parse("builder/file", base), Ok(TypeRef::Image(_))));
        assert!(matches!(TypeRef::parse("acme/file", base), Ok(TypeRef::Image(_))));
        assert_eq!(TypeRef::parse("./t/x", base).unwrap(), TypeRef::Local("/work/m/t/x".into()));
        assert_eq!(TypeRef::parse("../x", base).unwrap(), TypeRef::Local("/work/x".into()));
        assert!(matches!(TypeRef::parse("acme/x", base).unwrap(), TypeRef::Image(_)));
    }

    #[test]
    fn required_resource_types_match_by_repository_unless_pinned() {
        let base = Path::new("/");
        let actual = TypeRef::parse("acme/disk:1.2", base).unwrap();
        assert!(type_satisfies(&actual, "acme/disk", base));
        assert!(type_satisfies(&actual, "acme/disk:1.2", base));
        assert!(!type_satisfies(&actual, "acme/disk:1.3", base));
        assert!(!type_satisfies(&actual, "acme/vm", base));
        assert!(type_satisfies(&TypeRef::Builtin("file".into()), "builtin/file", base));
    }
}
