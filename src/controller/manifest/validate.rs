//! Validate (pure): what only a change of the spec can fix, found before anything runs — the
//! intervals, and where the outputs go.

use super::super::inputs::{self, ManifestInputError};
use super::super::outputs::OutputsTarget;
use crate::crd::Manifest;

/// A Manifest's settings, checked.
pub struct Checked {
    pub intervals: inputs::Intervals,
    /// Where its outputs are written, if it declares them.
    pub outputs: Option<OutputsTarget>,
}

/// Checks what can be checked of `obj` without reading anything.
pub fn check(obj: &Manifest) -> Result<Checked, ManifestInputError> {
    Ok(Checked { intervals: inputs::intervals(obj)?, outputs: OutputsTarget::of(obj)? })
}
