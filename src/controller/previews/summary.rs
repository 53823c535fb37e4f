//! A plan as a preview's status shows it: resources and their actions, what changed since each
//! was last VALID, the unknowns, the drift found on the way, the plan's id — sensitive values
//! masked, and no state.

use crate::controller::approval::plan_digest;
use crate::crd::preview::{PreviewPlan, PreviewResource};
use crate::engine::plan::{Change, Drift, Plan, Standing};
use crate::engine::protocol::{Action, StateResponse};
use crate::engine::validate::ValidatedManifest;

/// How long one value of a difference may be before it is cut.
const VALUE_CHARS: usize = 120;

/// The status's view of `plan` (of `manifest`), with the drift and changes its pass found.
pub fn of(plan: &Plan, manifest: &ValidatedManifest, drifts: &[Drift], changes: &[Change]) -> PreviewPlan {
    let mask = &plan.mask;
    let actions = |actions: &[Action]| -> Vec<String> {
        actions
            .iter()
            .map(|a| match a.description.is_empty() {
                true => a.name.clone(),
                false => mask.text(&format!("{}: {}", a.name, a.description)),
            })
            .collect()
    };
    let differences = |name: &str| -> Vec<String> {
        let Some(change) = changes.iter().find(|c| c.resource == name) else { return Vec::new() };
        let value = |v: Option<&serde_json::Value>| {
            v.map_or_else(|| "(absent)".into(), |v| crate::history::cut_to(&mask.text(&v.to_string()), VALUE_CHARS))
        };
        change
            .differences
            .iter()
            .map(|d| format!("{}: {} → {}", d.path, value(d.was.as_ref()), value(d.now.as_ref())))
            .collect()
    };
    let resources = plan
        .entries
        .iter()
        .map(|e| {
            let mut r = PreviewResource {
                name: e.name.clone(),
                type_: e.type_name.clone(),
                status: e.standing.label().into(),
                differences: differences(&e.name),
                ..PreviewResource::default()
            };
            match &e.standing {
                Standing::NeedsActions { actions: a, .. } => r.actions = actions(a),
                Standing::Pending { unknown_inputs, found, .. } => {
                    r.unknown = unknown_inputs.iter().map(|u| format!("{} = {}", u.path, u.expression)).collect();
                    if let Some(found) = found.as_deref() {
                        r.found = Some(found.status().to_string());
                        if let StateResponse::NeedsActions { actions: a, .. } = found {
                            r.actions = actions(a);
                        }
                    }
                }
                Standing::Failed(error) => r.message = Some(mask.text(&error.to_string())),
                Standing::Blocked { by } => r.message = Some(format!("blocked by {by}")),
                _ => {}
            }
            if let Some(replaced) = plan.replacement(&e.name) {
                let said = format!("must be replaced ({}): the old one is deleted first", replaced.describe());
                r.message = Some(mask.text(&r.message.take().map_or(said.clone(), |m| format!("{said}; {m}"))));
            }
            r
        })
        .collect();
    let removals = plan
        .removals
        .iter()
        .map(|r| PreviewResource {
            name: r.name.clone(),
            type_: r.type_name.clone(),
            status: r.removal.label().into(),
            actions: if r.removal == crate::engine::plan::Removal::ToDelete {
                vec!["delete".into()]
            } else {
                Vec::new()
            },
            message: match plan.replacement(&r.name).is_some() {
                true => Some("the old one, replaced: its identity changed".into()),
                false => r.removal.message().map(|m| mask.text(&m)),
            },
            ..PreviewResource::default()
        })
        .collect();
    let c = plan.counts();
    let replacing = plan.replacements.len();
    let deleting = plan.deleting().filter(|r| plan.replacement(&r.name).is_none()).count();
    let mut summary = format!("{} to apply, {} pending, {} valid", c.to_apply, c.pending, c.valid);
    if c.failed + c.blocked > 0 {
        summary.push_str(&format!(", {} failed, {} blocked", c.failed, c.blocked));
    }
    if deleting > 0 {
        summary.push_str(&format!(", {deleting} to delete"));
    }
    if replacing > 0 {
        summary.push_str(&format!(", {replacing} to replace"));
    }
    PreviewPlan {
        id: plan_digest(plan, manifest),
        revision: crate::controller::manifest::inputs::content_of(&manifest.revision).to_string(),
        changes: plan.has_changes(),
        summary,
        resources,
        removals,
        drift: drifts
            .iter()
            .map(|d| format!("{} was VALID and is {} now, with the same inputs", d.resource, d.now))
            .collect(),
        notes: plan.notes.iter().map(|n| mask.text(n)).collect(),
    }
}
