//! The registry's bookkeeping: shared watches, started with the first Manifest and stopped
//! with the last, and refusals told once. (Watching itself is tested on the real API server:
//! tests/apiserver/watches.rs.)

use super::*;

fn manifest(namespace: &str, name: &str) -> Manifest {
    let mut obj = Manifest::new(name, serde_norway::from_str("resources: {}\n").unwrap());
    obj.metadata.namespace = Some(namespace.into());
    obj.metadata.uid = Some(format!("uid-{name}"));
    obj
}

fn key(kind: &str) -> WatchKey {
    WatchKey {
        identity: "team/default".into(),
        namespace: Some("team".into()),
        api_version: "v1".into(),
        kind: kind.into(),
    }
}

fn running() -> Watch {
    Watch { users: BTreeSet::new(), stop: Some(CancellationToken::new()), refused: None }
}

fn refused(why: &str) -> Watch {
    Watch { users: BTreeSet::new(), stop: None, refused: Some((why.into(), Instant::now())) }
}

fn objects(of: &[(&str, &str, &str)]) -> BTreeSet<(WatchKey, String, String)> {
    of.iter().map(|(kind, name, resource)| (key(kind), name.to_string(), resource.to_string())).collect()
}

#[test]
fn one_watch_is_shared_by_the_manifests_that_need_it_and_stops_with_the_last() {
    let watches = Watches::disabled();
    let (a, b) = (manifest("team", "a"), manifest("team", "b"));
    let first = running();
    let stop = first.stop.clone().unwrap();
    let (_, launch) = watches.settle(
        &Subject::manifest(&a),
        objects(&[("ConfigMap", "a-settings", "settings")]),
        vec![(key("ConfigMap"), first)],
    );
    // Started by the caller only now, with a registered: its first listing can wake a.
    assert_eq!(launch.iter().map(|(key, _)| key.clone()).collect::<Vec<_>>(), [key("ConfigMap")]);
    assert!(watches.shared.state.lock().unwrap().manifests.contains_key("team/a"));
    // b's registration started one too, concurrently: the running one is kept, b's stopped.
    let second = running();
    let duplicate = second.stop.clone().unwrap();
    let (seen, launch) = watches.settle(
        &Subject::manifest(&b),
        objects(&[("ConfigMap", "b-settings", "settings")]),
        vec![(key("ConfigMap"), second)],
    );
    assert_eq!(seen, Watching::default());
    assert!(launch.is_empty(), "the duplicate is not started");
    assert!(duplicate.is_cancelled() && !stop.is_cancelled());
    assert_eq!(watches.shared.metrics.open.get(), 1);
    watches.forget("team", "a");
    assert!(!stop.is_cancelled(), "b still needs it");
    // b no longer declares a ConfigMap: its last user is gone.
    watches.settle(&Subject::manifest(&b), BTreeSet::new(), Vec::new());
    assert!(stop.is_cancelled());
    assert_eq!(watches.shared.metrics.open.get(), 0);
    assert!(watches.shared.state.lock().unwrap().watches.is_empty());
}

#[test]
fn a_refused_watch_is_told_once_and_in_every_pass_s_message() {
    let watches = Watches::disabled();
    let a = manifest("team", "a");
    let declared = || objects(&[("ConfigMap", "settings", "settings"), ("Secret", "creds", "creds")]);
    let started = vec![(key("ConfigMap"), running()), (key("Secret"), refused("secrets is forbidden"))];
    let (first, _) = watches.settle(&Subject::manifest(&a), declared(), started);
    assert_eq!(first.refused.as_deref(), Some("Secret in namespace team: secrets is forbidden"));
    assert!(first.newly_refused);
    let (again, _) = watches.settle(&Subject::manifest(&a), declared(), Vec::new());
    assert_eq!(again.refused, first.refused);
    assert!(!again.newly_refused, "told once");
    assert_eq!(watches.refused(&a), first.refused);
    assert_eq!(watches.shared.metrics.open.get(), 1, "a refused watch is not open");
}

#[test]
fn a_change_wakes_only_the_manifest_that_declares_the_object() {
    let watches = Watches::disabled();
    let a = manifest("team", "a");
    watches.settle(
        &Subject::manifest(&a),
        objects(&[("ConfigMap", "settings", "web")]),
        vec![(key("ConfigMap"), running())],
    );
    let mut changes = watches.shared.woken.subscribe();
    let owner = |ns: &str, name: &str, resource: &str| Some((format!("{ns}/{name}"), resource.to_string()));
    watches.shared.wake(&key("ConfigMap"), "settings", owner("team", "a", "web"));
    let woken = changes.try_recv().expect("woken");
    assert_eq!((woken.manifest(), woken.uid.as_str(), woken.resource.as_str()), (Some(("team", "a")), "uid-a", "web"));
    // Another Manifest's annotation, another resource, another object, another kind: nothing.
    watches.shared.wake(&key("ConfigMap"), "settings", owner("team", "b", "web"));
    watches.shared.wake(&key("ConfigMap"), "settings", owner("team", "a", "db"));
    watches.shared.wake(&key("ConfigMap"), "other", owner("team", "a", "web"));
    watches.shared.wake(&key("Secret"), "settings", owner("team", "a", "web"));
    watches.shared.wake(&key("ConfigMap"), "settings", None);
    assert!(changes.try_recv().is_err());
}
