//! Expire: a preview planned for its generation is kept for its TTL after it finished, then
//! deleted (an abandoned pull request's previews do not pile up).

use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use crate::controller::context::Context;
use crate::controller::reasons::PreviewPhase;
use crate::crd::preview::ManifestPreview;

/// How long a preview is kept once planned, unless its spec says.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// How long `obj` is kept once planned.
pub fn ttl(obj: &ManifestPreview) -> Duration {
    obj.spec.ttl_seconds_after_finished.map_or(DEFAULT_TTL, |s| Duration::from_secs(u64::from(s)))
}

/// A preview planned for this generation: deleted once its TTL passed, else looked at again
/// then. `None`: it is to be planned.
pub async fn expire(obj: &ManifestPreview, ctx: &Context, now: i64) -> Result<Option<Action>, kube::Error> {
    let Some(status) = &obj.status else { return Ok(None) };
    let finished = matches!(status.phase.as_deref(), Some(p) if p == PreviewPhase::Planned.as_str() || p == PreviewPhase::Failed.as_str());
    if !finished || status.observed_generation != obj.metadata.generation {
        return Ok(None);
    }
    let at = status.finished_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
    let at_ms = at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(now, |d| d.as_millis() as i64);
    let left = (at_ms + ttl(obj).as_millis() as i64) - now;
    if left > 0 {
        return Ok(Some(Action::requeue(Duration::from_millis(left as u64))));
    }
    let api: Api<ManifestPreview> = Api::namespaced(ctx.client.clone(), &obj.namespace().unwrap_or_default());
    match api.delete(&obj.name_any(), &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(Some(Action::await_change()))
}
