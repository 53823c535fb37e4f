//! Every Kubernetes API call the controller makes, listed in one place: the Helm chart's RBAC
//! rules are held against [`API_ACCESS`] by a test, and every request the client sends is
//! mapped to its RBAC (verb, group, resource) by [`ApiCall::from_request`] — counted in
//! `deployster_kube_api_requests_total`, which the end-to-end tests read to check that the
//! controller used nothing outside the list.

/// Where a permission is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In every watched namespace (cluster-wide when the controller watches all of them).
    Watched,
    /// Only in the leader lease's namespace.
    Lease,
    /// In every watched namespace, when image types run as Pods (`--executor pod`).
    Pods,
}

/// Verbs on one (group, resource) in one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub group: &'static str,
    /// `resource` or `resource/subresource`.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub scope: Scope,
}

/// What the controller does with the API, and why.
pub const API_ACCESS: &[Access] = &[
    // The watch cache (list, watch), each reconcile's fresh read (get) and the finalizer (a
    // merge patch of metadata.finalizers). The one object it creates, the outputs Secret, names
    // its Manifest as controller owner without blockOwnerDeletion (controller_owner_ref), which
    // is why `update` on manifests/finalizers is not needed; setting it would need that too.
    Access {
        group: "deployster.io",
        resource: "manifests",
        verbs: &["get", "list", "watch", "patch"],
        scope: Scope::Watched,
    },
    // Status: server-side apply.
    Access { group: "deployster.io", resource: "manifests/status", verbs: &["patch"], scope: Scope::Watched },
    // Pipelines (src/controller/pipelines): watched (list, watch), their status written by
    // server-side apply. Their steps merge-patch the vars of Manifests (`patch` above) and read
    // them (`get`); their logs are ConfigMaps they own (created, replaced; listed).
    Access { group: "deployster.io", resource: "pipelines", verbs: &["list", "watch"], scope: Scope::Watched },
    Access { group: "deployster.io", resource: "pipelines/status", verbs: &["patch"], scope: Scope::Watched },
    // ManifestPreviews (src/controller/previews): watched (list, watch), their status written by
    // a merge patch, deleted once their TTL passed.
    Access {
        group: "deployster.io",
        resource: "manifestpreviews",
        verbs: &["list", "watch", "delete"],
        scope: Scope::Watched,
    },
    Access { group: "deployster.io", resource: "manifestpreviews/status", verbs: &["patch"], scope: Scope::Watched },
    // kube's event recorder creates an event, then patches it into a series when it repeats.
    Access { group: "events.k8s.io", resource: "events", verbs: &["create", "patch"], scope: Scope::Watched },
    // Plugs referencing Secrets and ConfigMaps, read when a pass starts; their metadata watched
    // (list, watch: names and resourceVersions only, never their data) so that a change starts
    // a pass at once; a Manifest's outputs, written to a Secret or ConfigMap it owns (created,
    // then replaced when they change).
    Access {
        group: "",
        resource: "secrets",
        verbs: &["get", "list", "watch", "create", "update"],
        scope: Scope::Watched,
    },
    // Besides: a Pipeline's log (src/controller/pipelines/log.rs), ConfigMaps it owns, created,
    // replaced, read by name, listed, and deleted once compacted.
    Access {
        group: "",
        resource: "configmaps",
        verbs: &["get", "list", "watch", "create", "update", "delete"],
        scope: Scope::Watched,
    },
    // builtin/kubernetes (src/kubernetes): each pass acts as its Manifest's ServiceAccount by
    // impersonation; what it may do is that account's, none of the controller's. A preview's
    // ServiceAccount is read first (it must exist), and so is the Pod executor's (below).
    Access { group: "", resource: "serviceaccounts", verbs: &["get", "impersonate"], scope: Scope::Watched },
    // The Pod executor (src/pod/executor.rs), in each Manifest's namespace: its ServiceAccount
    // (read as above: it must exist; its image pull secrets), the plugs' PersistentVolumeClaims (they must
    // exist; Secrets and ConfigMaps are read as above); each invocation's Pod — created,
    // watched (a watch on its name: list and watch), read, its log followed, deleted; the
    // sweep lists a Manifest's Pods — and its request Secret: created, handed to the Pod (a
    // merge patch of its ownerReferences), deleted with the Pod (the sweep lists them first).
    Access { group: "", resource: "persistentvolumeclaims", verbs: &["get"], scope: Scope::Pods },
    Access { group: "", resource: "pods", verbs: &["get", "list", "watch", "create", "delete"], scope: Scope::Pods },
    Access { group: "", resource: "pods/log", verbs: &["get"], scope: Scope::Pods },
    // Warm runners (src/pod/runner.rs): each invocation is an exec into its runner over a
    // WebSocket — a GET, which servers before 1.31 authorize as `get` and later ones as
    // `create` (as they always did for kubectl's POST).
    Access { group: "", resource: "pods/exec", verbs: &["get", "create"], scope: Scope::Pods },
    Access { group: "", resource: "secrets", verbs: &["patch", "delete"], scope: Scope::Pods },
    // Leader election: read, create the first time, renew/take over with resourceVersion checks.
    Access {
        group: "coordination.k8s.io",
        resource: "leases",
        // list and delete: a shard group's Leases are read in one list, and stale members'
        // deleted.
        verbs: &["get", "list", "create", "update", "delete"],
        scope: Scope::Lease,
    },
];

/// Whether `API_ACCESS` allows `verb` on `group`/`resource`.
pub fn allowed(group: &str, resource: &str, verb: &str) -> bool {
    API_ACCESS.iter().any(|a| a.group == group && a.resource == resource && a.verbs.contains(&verb))
}

/// One request, in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    pub verb: &'static str,
    /// `""` for the core group.
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub namespace: Option<String>,
}

impl ApiCall {
    /// The RBAC view of a request to `path` (with its query); `None` for paths that are not
    /// resources (`/version`, discovery).
    pub fn from_request(method: &str, path_and_query: &str) -> Option<ApiCall> {
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            _ => (None, rest),
        };
        let (resource, named) = match rest {
            [resource] => (resource.to_string(), false),
            [resource, _name] => (resource.to_string(), true),
            [resource, _name, sub] => (format!("{resource}/{sub}"), true),
            _ => return None,
        };
        let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
        let verb = match (method, named) {
            ("GET", _) if watch => "watch",
            ("GET", true) => "get",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => return None,
        };
        Some(ApiCall { verb, group: group.to_string(), resource, namespace })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, path: &str) -> (String, String, String, Option<String>) {
        let c = ApiCall::from_request(method, path).unwrap_or_else(|| panic!("{method} {path} is a resource"));
        (c.verb.to_string(), c.group, c.resource, c.namespace)
    }

    #[test]
    fn requests_map_to_rbac_verbs_and_resources() {
        let ns = || Some("team".to_string());
        let m = "/apis/deployster.io/v1alpha1/namespaces/team/manifests";
        assert_eq!(
            call("GET", &format!("{m}?limit=1")),
            ("list".into(), "deployster.io".into(), "manifests".into(), ns())
        );
        assert_eq!(call("GET", &format!("{m}?watch=true&resourceVersion=5")).0, "watch");
        assert_eq!(call("GET", "/apis/deployster.io/v1alpha1/manifests?watch=1").3, None, "cluster-wide");
        assert_eq!(call("PATCH", &format!("{m}/demo/status?fieldManager=x")).2, "manifests/status");
        assert_eq!(
            call("PATCH", &format!("{m}/demo")),
            ("patch".into(), "deployster.io".into(), "manifests".into(), ns())
        );
        assert_eq!(
            call("GET", "/api/v1/namespaces/team/secrets/db"),
            ("get".into(), "".into(), "secrets".into(), ns())
        );
        let lease = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
        assert_eq!(call("POST", lease).0, "create");
        assert_eq!(call("PUT", &format!("{lease}/deployster")).0, "update");
        assert_eq!(call("DELETE", &format!("{lease}/deployster")).0, "delete");
        assert_eq!(call("DELETE", lease).0, "deletecollection");
        assert_eq!(call("GET", "/api/v1/namespaces/team"), ("get".into(), "".into(), "namespaces".into(), None));
        assert_eq!(ApiCall::from_request("GET", "/version"), None);
        assert_eq!(ApiCall::from_request("GET", "/apis"), None);
    }

    #[test]
    fn the_list_names_each_resource_once_per_scope_with_known_verbs() {
        let verbs = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "impersonate"];
        for (i, a) in API_ACCESS.iter().enumerate() {
            assert!(a.verbs.iter().all(|v| verbs.contains(v)), "{a:?}");
            let again =
                API_ACCESS[i + 1..].iter().any(|b| (b.group, b.resource, b.scope) == (a.group, a.resource, a.scope));
            assert!(!again, "{a:?} is listed twice");
        }
        assert!(allowed("deployster.io", "manifests/status", "patch"));
        assert!(!allowed("deployster.io", "manifests/status", "update"));
        let watched_delete = API_ACCESS
            .iter()
            .any(|a| a.scope == Scope::Watched && a.resource == "secrets" && a.verbs.contains(&"delete"));
        assert!(!watched_delete, "outputs are removed by garbage collection");
    }
}
