//! Kept `init` answers, shared by the executors: a reconcile loop or the controller does not
//! re-run a type's `init` on every pass — until the program (its file, image digest or image ID)
//! or what it is asked changes.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use sha2::Digest;

use super::RUN_ID_ENV;
use super::{ExecError, Invocation, Outcome};

/// What makes two `init` invocations the same, as a digest: what identifies the program as it
/// is now, its entrypoint and arguments as run, its working directory, environment (but the
/// run id) and request (which names the resource: one entry per resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct InitKey([u8; 32]);

impl InitKey {
    pub(crate) fn of(program: &[&[u8]], entrypoint: Option<&str>, args: &[String], invocation: &Invocation) -> Self {
        let mut digest = sha2::Sha256::new();
        // Each part with its length first, so that no two different keys write the same bytes.
        let mut part = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(bytes);
        };
        let count = |n: usize| (n as u64).to_le_bytes();
        part(&count(program.len()));
        program.iter().for_each(|p| part(p));
        part(&[u8::from(entrypoint.is_some())]);
        part(entrypoint.unwrap_or_default().as_bytes());
        part(&count(args.len()));
        args.iter().for_each(|a| part(a.as_bytes()));
        part(invocation.workdir.as_ref().map_or(&b""[..], |w| w.as_os_str().as_encoded_bytes()));
        // The run id is bookkeeping, different on every pass: it cannot change what a type
        // needs, and keyed on it no answer would outlive its pass.
        let env: Vec<&(String, String)> = invocation.env.iter().filter(|(name, _)| name != RUN_ID_ENV).collect();
        part(&count(env.len()));
        for (name, value) in env {
            part(name.as_bytes());
            part(value.as_bytes());
        }
        part(&invocation.stdin);
        InitKey(digest.finalize().into())
    }
}

/// Kept init answers, bounded: at most [`InitCache::KEPT`] entries, the least recently used
/// going first. An entry is a digest and a shared answer — every resource of a type gets the
/// same answer, kept once — so 10,000 Manifests of five resources cost a few MiB, not tens.
pub(crate) struct InitCache {
    entries: lru::LruCache<InitKey, Arc<Outcome>>,
    /// Each distinct answer once, by its digest; answers no entry holds any more are dropped
    /// when this has doubled since it was last pruned, or after [`InitCache::KEPT`] inserts.
    answers: HashMap<[u8; 32], Arc<Outcome>>,
    pruned_at: usize,
    inserts: usize,
}

impl Default for InitCache {
    fn default() -> Self {
        let kept = NonZeroUsize::new(Self::KEPT).expect("non-zero");
        Self { entries: lru::LruCache::new(kept), answers: HashMap::new(), pruned_at: 0, inserts: 0 }
    }
}

impl InitCache {
    const KEPT: usize = 100_000;

    fn get(&mut self, key: &InitKey) -> Option<Outcome> {
        self.entries.get(key).map(|answer| Outcome::clone(answer))
    }

    fn insert(&mut self, key: InitKey, outcome: &Outcome) {
        let mut digest = sha2::Sha256::new();
        for part in [&outcome.stdout[..], b"\0", &outcome.stderr[..], b"\0", outcome.exit.to_string().as_bytes()] {
            digest.update(part);
        }
        let answer = self.answers.entry(digest.finalize().into()).or_insert_with(|| Arc::new(outcome.clone())).clone();
        self.entries.put(key, answer);
        self.inserts += 1;
        if self.answers.len() > 2 * self.pruned_at.max(16) || self.inserts >= Self::KEPT {
            self.answers.retain(|_, answer| Arc::strong_count(answer) > 1);
            (self.pruned_at, self.inserts) = (self.answers.len(), 0);
        }
    }
}

/// An executor's kept init answers.
#[derive(Default)]
pub(crate) struct InitAnswers(Mutex<InitCache>);

impl InitAnswers {
    /// The kept answer for `key`, or what `run` answers — kept when it succeeded. With no key
    /// (not an init, or a program that cannot be identified) `run` answers.
    pub(crate) async fn get_or_run(
        &self,
        key: Option<InitKey>,
        run: impl Future<Output = Result<Outcome, ExecError>>,
    ) -> Result<Outcome, ExecError> {
        if let Some(hit) = key.as_ref().and_then(|key| self.0.lock().expect("init cache lock").get(key)) {
            return Ok(hit);
        }
        let outcome = run.await?;
        if let Some(key) = key
            && outcome.exit.success()
        {
            self.0.lock().expect("init cache lock").insert(key, &outcome);
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::executor::Exit;
    use crate::engine::typeref::TypeRef;

    fn answer(text: &str) -> Outcome {
        Outcome { exit: Exit::Code(0), stdout: text.as_bytes().to_vec(), stderr: vec![], elapsed: Duration::ZERO }
    }

    fn len(cache: &InitCache) -> (usize, usize) {
        (cache.entries.len(), cache.answers.len())
    }

    /// The kept init answers are bounded in count, and an answer many resources share is kept
    /// once: 10,000 Manifests of program types cost a few MiB.
    #[test]
    fn kept_init_answers_are_bounded_and_shared() {
        let mut cache = InitCache::default();
        let key = |n: usize| -> InitKey {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(n as u64).to_le_bytes());
            InitKey(key)
        };
        for n in 0..InitCache::KEPT + 10 {
            cache.insert(key(n), &answer(if n % 2 == 0 { "{\"state_action\": {}}" } else { "{}" }));
        }
        assert_eq!(len(&cache), (InitCache::KEPT, 2), "bounded; two distinct answers kept once each");
        assert!(cache.get(&key(0)).is_none(), "the least recently used went first");
        assert_eq!(cache.get(&key(InitCache::KEPT + 9)).unwrap().stdout, b"{}");
        // Answers no entry holds any more go too: the distinct answers kept stay bounded.
        for n in 0..InitCache::KEPT {
            cache.insert(key(n), &answer(&format!("{{\"n\": {n}}}")));
            assert!(len(&cache).1 <= 2 * InitCache::KEPT, "{:?}", len(&cache));
        }
        // Once every entry holds the same answer, the next prune (within KEPT inserts) keeps it alone.
        for n in 0..2 * InitCache::KEPT {
            cache.insert(key(n % InitCache::KEPT), &answer("{}"));
        }
        assert_eq!(len(&cache), (InitCache::KEPT, 1), "every answer but the one all entries share was dropped");
    }

    #[test]
    fn keys_differ_where_invocations_do_and_parts_cannot_run_together() {
        let invocation = |stdin: &str| Invocation {
            stdin: stdin.into(),
            ..Invocation::new(TypeRef::Builtin("file".into()), Duration::ZERO)
        };
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = InitKey::of(&[b"sha256:1"], None, &args(&["a", "b"]), &invocation("{}"));
        assert_eq!(base, InitKey::of(&[b"sha256:1"], None, &args(&["a", "b"]), &invocation("{}")));
        for other in [
            InitKey::of(&[b"sha256:2"], None, &args(&["a", "b"]), &invocation("{}")),
            InitKey::of(&[b"sha256:1"], Some(""), &args(&["a", "b"]), &invocation("{}")),
            InitKey::of(&[b"sha256:1"], None, &args(&["ab"]), &invocation("{}")),
            InitKey::of(&[b"sha256:1"], None, &args(&["a"]), &invocation("b{}")),
            InitKey::of(&[b"sha256:1", b"a"], None, &args(&["b"]), &invocation("{}")),
            InitKey::of(&[b"sha256:1"], None, &args(&["a", "b"]), &invocation("{ }")),
            InitKey::of(
                &[b"sha256:1"],
                None,
                &args(&["a", "b"]),
                &Invocation { env: vec![("X".into(), "1".into())], ..invocation("{}") },
            ),
        ] {
            assert_ne!(base, other);
        }
        let run = |id: &str| Invocation { env: vec![(RUN_ID_ENV.into(), id.into())], ..invocation("{}") };
        assert_eq!(
            InitKey::of(&[b"sha256:1"], None, &args(&["a", "b"]), &run("pass-1")),
            InitKey::of(&[b"sha256:1"], None, &args(&["a", "b"]), &run("pass-2")),
            "the run id, different on every pass, is not part of the key"
        );
    }

    #[tokio::test]
    async fn a_successful_answer_is_kept_and_a_failed_one_is_not() {
        let answers = InitAnswers::default();
        let key = InitKey([7; 32]);
        let failed = Outcome { exit: Exit::Code(1), ..answer("no") };
        assert_eq!(answers.get_or_run(Some(key), async { Ok(failed.clone()) }).await.unwrap().stdout, b"no");
        assert_eq!(answers.get_or_run(Some(key), async { Ok(answer("{}")) }).await.unwrap().stdout, b"{}");
        let kept = answers.get_or_run(Some(key), async { panic!("a kept answer is not asked again") }).await;
        assert_eq!(kept.unwrap().stdout, b"{}");
        let unkeyed = answers.get_or_run(None, async { Ok(answer("fresh")) }).await.unwrap();
        assert_eq!(unkeyed.stdout, b"fresh");
    }
}
