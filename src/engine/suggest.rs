//! "Did you mean": the known name closest to one that names nothing, for the errors a typo
//! causes (a type, a variable, a resource, a config key). One measure everywhere, so that the
//! same slip gets the same answer wherever it is made.

/// How alike two names must be (Jaro–Winkler similarity, which favours a shared beginning) for
/// one to be offered for the other: `enviroment` finds both `environment` and `env`; `path`
/// does not find `mode`.
const ALIKE: f64 = 0.8;

/// The name of `known` most like `name`, when one is alike enough to be what was meant.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .filter(|k| *k != name)
        .map(|k| (strsim::jaro_winkler(name, k), k))
        .filter(|(score, _)| *score >= ALIKE)
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(a.1)))
        .map(|(_, k)| k)
}

/// ` (did you mean `x`?)` for [`closest`], or nothing.
pub fn hint<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, known).map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_what_was_meant_and_nothing_else_is_offered() {
        assert_eq!(closest("enviroment", ["env", "region"]), Some("env"));
        assert_eq!(closest("enviroment", ["env", "environment"]), Some("environment"));
        assert_eq!(closest("contents", ["path", "content", "mode"]), Some("content"));
        assert_eq!(closest("data_dri", ["data_dir", "app_config"]), Some("data_dir"));
        assert_eq!(closest("fiel", ["directory", "file", "package"]), Some("file"));
        assert_eq!(closest("bulitin", ["builtin"]), Some("builtin"));
        assert_eq!(closest("path", ["mode", "owner"]), None);
        assert_eq!(closest("a", ["b"]), None);
        // The name itself is not a suggestion.
        assert_eq!(closest("env", ["env"]), None);
        assert_eq!(hint("contents", ["content"]), " (did you mean `content`?)");
        assert_eq!(hint("zzz", ["content"]), "");
    }
}
