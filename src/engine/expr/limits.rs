//! What one render may cost: the limits the render budget ([`super::budget`]) charges against
//! while a template runs, and the constant folding check ([`super::folding`]) before it does.

/// Bytes one render may produce or handle: far beyond any real configuration (a Kubernetes
/// object is at most 1.5 MiB), small beside the process.
pub const RENDER_BUDGET: usize = 16 << 20;

/// What a value in a sequence or map costs beyond its text (a minijinja value and its slot).
pub const ITEM_COST: usize = 32;

/// The detail of the error a render over budget fails with.
pub const OVER_BUDGET: &str = "over the render budget";
