//! The Pod and the Secret one invocation of an image type runs as: plain data from plain data,
//! so that what a Pod gets — identity, limits, mounts, the helper in front of the program — is
//! decided in one place and tested without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, ExecAction, KeyToPath, Lifecycle,
    LifecycleHandler, LocalObjectReference, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, Secret, SecretVolumeSource, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

use crate::crd::PodOptions;
use crate::pod_helper::entry::{AWAIT_INSTALL, ENTRY_SUBCOMMAND, ENV_KEY, HelperCommand};

/// Where the helper is installed in the type's container, and where the request is mounted.
const HELPER_DIR: &str = "/.deployster/bin";
const REQUEST_DIR: &str = "/.deployster/request";
/// Where the helper (deployster) is in its own image.
pub const HELPER_BINARY: &str = "/deployster";
/// The key of the invocation's Secret that holds the request.
pub const REQUEST_KEY: &str = "request";
/// The label every object of Deployster's carries (the sweep and the RBAC selectors use it).
pub const OWNER_LABEL: &str = "deployster.io/owner";
/// The value of [`OWNER_LABEL`] on every Pod and Secret of Deployster's.
pub const OWNER_VALUE: &str = "deployster";

/// Where a plug's content comes from in the cluster.
pub use crate::engine::validate::ClusterPlug as PlugSource;

/// A plug as the Pod mounts it: at the `container_path` the type asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlug {
    pub name: String,
    pub container_path: String,
    pub source: PlugSource,
}

/// What one invocation's Pod is made of.
#[derive(Debug, Clone)]
pub struct PodInvocation {
    pub namespace: String,
    /// From [`pod_name`]: the same invocation always gets the same name.
    pub name: String,
    /// The type's image, by digest (one pass never mixes two builds).
    pub image: String,
    /// The image that carries the helper (the controller's own).
    pub helper_image: String,
    pub entry: HelperCommand,
    /// `spec.serviceAccountName` of the Manifest; the namespace's `default` when `None`.
    pub service_account: Option<String>,
    pub plugs: Vec<PodPlug>,
    /// The invocation's time limit; the Pod's `activeDeadlineSeconds` backs it up.
    pub deadline: Duration,
    pub labels: BTreeMap<String, String>,
    /// The Manifest that owns the Pod (gone with it).
    pub owner: Option<OwnerReference>,
    /// The user the type's program runs as, when the image names no numeric non-root user.
    pub run_as_user: Option<i64>,
    /// The Manifest's `spec.pod`: resources, node selection, `runAsNonRoot`, pull secrets.
    pub options: PodOptions,
}

/// A name for an invocation's Pod: the same for the same run, resource, phase and attempt (a
/// new leader finds the Pod of an interrupted pass by it), DNS-1123, at most 63 characters.
pub fn pod_name(run_id: &str, resource: &str, phase: &str, attempt: u32) -> String {
    let digest = Sha256::digest(format!("{run_id}\0{resource}\0{phase}\0{attempt}"));
    let readable: String = resource
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .take(30)
        .collect();
    let readable = readable.trim_matches('-');
    let hash = &hex::encode(digest)[..16];
    if readable.is_empty() { format!("dst-{hash}") } else { format!("dst-{readable}-{hash}") }
}

/// What every container of Deployster's Pods runs under: the Pod Security Standards'
/// `restricted` profile, with a read-only root file system.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        ..SecurityContext::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount { name: name.into(), mount_path: path.into(), read_only: Some(read_only), ..VolumeMount::default() }
}

fn volume_of(plug: &PodPlug) -> (Volume, bool) {
    let items =
        |key: &Option<String>| key.as_ref().map(|k| vec![KeyToPath { key: k.clone(), path: k.clone(), mode: None }]);
    let name = format!("plug-{}", plug.name.to_ascii_lowercase().replace('_', "-"));
    match &plug.source {
        PlugSource::Secret { name: secret, key } => (
            Volume {
                name,
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    items: items(key),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            true,
        ),
        PlugSource::ConfigMap { name: map, key } => (
            Volume {
                name,
                config_map: Some(ConfigMapVolumeSource {
                    name: map.clone(),
                    items: items(key),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            true,
        ),
        PlugSource::Claim { name: claim } => (
            Volume {
                name,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.clone(),
                    read_only: Some(false),
                }),
                ..Volume::default()
            },
            false,
        ),
    }
}

/// The invocation's Pod: the helper's container installs the helper into an `emptyDir` (its
/// `postStart` hook holds the next container until then) and holds until the type's container
/// is done; that container runs the helper in front of the program, with the request Secret, a
/// writable `/tmp` and the plugs mounted, under the Manifest's ServiceAccount without its token.
/// (Not an init container: see [`crate::pod_helper::entry`].)
pub fn pod(invocation: &PodInvocation, request_secret: &str) -> Pod {
    made(invocation, Role::Invocation { request_secret })
}

/// A warm runner's Pod (issue 37): made as an invocation's is — the same identity, isolation,
/// plugs and options — but with no request, no deadline, and the type's container holding
/// ([`crate::pod_helper::serve::ServeMode::Hold`]) until it has been idle for `idle`; each invocation is an
/// exec of [`runner_command`] into it. `invocation.entry` and `deadline` are not used.
pub fn runner_pod(invocation: &PodInvocation, idle: Duration) -> Pod {
    made(invocation, Role::Runner { idle })
}

/// The command an exec into a runner runs for `mode`.
pub fn runner_command(mode: &crate::pod_helper::serve::ServeMode) -> Vec<String> {
    let (installed, _) = crate::pod_helper::entry::installed(std::path::Path::new(HELPER_DIR));
    let mut command = vec![installed.display().to_string(), crate::pod_helper::serve::SERVE_SUBCOMMAND.to_string()];
    command.extend(crate::pod_helper::serve::args(mode, std::path::Path::new(RUNNER_LOCKS)));
    command
}

/// Where a runner's invocations keep their locks: its writable `/tmp`, which every process of
/// the type's container shares.
const RUNNER_LOCKS: &str = "/tmp";

enum Role<'a> {
    Invocation { request_secret: &'a str },
    Runner { idle: Duration },
}

fn made(invocation: &PodInvocation, role: Role<'_>) -> Pod {
    let mut volumes = vec![
        Volume { name: "helper".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
        Volume { name: "tmp".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
    ];
    let mut mounts = vec![mount("helper", HELPER_DIR, false), mount("tmp", "/tmp", false)];
    if let Role::Invocation { request_secret } = role {
        volumes.insert(
            1,
            Volume {
                name: "request".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(request_secret.into()),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
        );
        mounts.insert(1, mount("request", REQUEST_DIR, true));
    }
    for plug in &invocation.plugs {
        let (volume, read_only) = volume_of(plug);
        let mut mounted = mount(&volume.name, &plug.container_path, read_only);
        // One key is a file at the plug's path, as the controller's own plugs are.
        if let PlugSource::Secret { key: Some(key), .. } | PlugSource::ConfigMap { key: Some(key), .. } = &plug.source {
            mounted.sub_path = Some(key.clone());
        }
        mounts.push(mounted);
        volumes.push(volume);
    }
    let resources = invocation.options.resources.as_ref().map(|r| {
        let quantities = |m: &BTreeMap<String, String>| {
            (!m.is_empty()).then(|| m.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect())
        };
        ResourceRequirements { requests: quantities(&r.requests), limits: quantities(&r.limits), ..Default::default() }
    });
    let helper_dir = std::path::Path::new(HELPER_DIR);
    let (installed, done) = crate::pod_helper::entry::installed(helper_dir);
    let (command, deadline) = match role {
        Role::Invocation { .. } => {
            let mut entry = invocation.entry.clone();
            entry.done = Some(done);
            let mut command = vec![installed.display().to_string(), ENTRY_SUBCOMMAND.to_string()];
            command.extend(entry.args());
            (command, Some(invocation.deadline.as_secs().max(1) as i64 + 30))
        }
        Role::Runner { idle } => (runner_command(&crate::pod_helper::serve::ServeMode::Hold { idle, done }), None),
    };
    let helper_command =
        |flag: &str| vec![HELPER_BINARY.into(), ENTRY_SUBCOMMAND.into(), flag.into(), HELPER_DIR.into()];
    let helper = Container {
        name: "helper".into(),
        image: Some(invocation.helper_image.clone()),
        command: Some(helper_command("--install")),
        lifecycle: Some(Lifecycle {
            post_start: Some(LifecycleHandler {
                exec: Some(ExecAction { command: Some(helper_command(AWAIT_INSTALL)) }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        volume_mounts: Some(vec![mount("helper", HELPER_DIR, false)]),
        security_context: Some(restricted()),
        resources: resources.as_ref().map(helper_resources),
        ..Container::default()
    };
    let main = Container {
        name: "main".into(),
        image: Some(invocation.image.clone()),
        command: Some(command),
        volume_mounts: Some(mounts),
        security_context: Some(restricted()),
        termination_message_policy: Some("File".into()),
        resources,
        ..Container::default()
    };
    let options = &invocation.options;
    let tolerations: Vec<Toleration> = options
        .tolerations
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        })
        .collect();
    let pull_secrets: Vec<LocalObjectReference> =
        options.image_pull_secrets.iter().map(|r| LocalObjectReference { name: r.name.clone() }).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(invocation.name.clone()),
            namespace: Some(invocation.namespace.clone()),
            labels: Some(invocation.labels.clone()),
            owner_references: invocation.owner.clone().map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            service_account_name: invocation.service_account.clone(),
            automount_service_account_token: Some(false),
            active_deadline_seconds: deadline,
            node_selector: (!options.node_selector.is_empty()).then(|| options.node_selector.clone()),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            image_pull_secrets: (!pull_secrets.is_empty()).then_some(pull_secrets),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(options.run_as_non_root.unwrap_or(true)),
                run_as_user: invocation.run_as_user,
                // The user chosen here gets a group of the same id, and a writable claim's
                // volume is made that group's (where the volume type supports it), so that a
                // non-root type can write to a fresh volume.
                run_as_group: invocation.run_as_user,
                fs_group: invocation.run_as_user,
                fs_group_change_policy: invocation.run_as_user.map(|_| "OnRootMismatch".into()),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
                ..PodSecurityContext::default()
            }),
            containers: vec![helper, main],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// What the helper's container asks for, when the type's does: a namespace whose quota counts
/// CPU or memory refuses a Pod with a container that states none. Small, since a Pod's request is
/// the sum of its containers': the helper copies a file and then sleeps. Only the resources the
/// type's container names (an extended resource, such as a GPU, the helper never takes).
fn helper_resources(of_main: &ResourceRequirements) -> ResourceRequirements {
    let small = |m: &Option<BTreeMap<String, Quantity>>| {
        let m: BTreeMap<String, Quantity> = m
            .iter()
            .flatten()
            .filter_map(|(name, _)| {
                let quantity = match name.as_str() {
                    "cpu" => "10m",
                    "memory" => "32Mi",
                    "ephemeral-storage" => "128Mi",
                    _ => return None,
                };
                Some((name.clone(), Quantity(quantity.into())))
            })
            .collect();
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements { requests: small(&of_main.requests), limits: small(&of_main.limits), ..Default::default() }
}

/// The request's Secret: immutable, owned by the Pod (gone with it), never in the Pod's spec;
/// with the program's extra environment beside it.
pub fn request_secret(
    invocation: &PodInvocation,
    name: &str,
    pod_owner: OwnerReference,
    request: &[u8],
    env: &[(String, String)],
) -> Secret {
    let env: serde_json::Map<String, serde_json::Value> =
        env.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
    let env = serde_json::to_vec(&env).expect("a map of strings serializes");
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(invocation.namespace.clone()),
            labels: Some(invocation.labels.clone()),
            owner_references: Some(vec![pod_owner]),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (REQUEST_KEY.to_string(), ByteString(request.to_vec())),
            (ENV_KEY.to_string(), ByteString(env)),
        ])),
        ..Secret::default()
    }
}

/// The request's path in the type's container (for [`HelperCommand::request`]).
pub fn request_path() -> std::path::PathBuf {
    std::path::Path::new(REQUEST_DIR).join(REQUEST_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(plugs: Vec<PodPlug>) -> PodInvocation {
        PodInvocation {
            namespace: "team-a".into(),
            name: pod_name("run-1", "web_db", "action:create", 0),
            image: "registry/acme/db@sha256:abc".into(),
            helper_image: "registry/deployster/controller:0.1.0".into(),
            entry: HelperCommand {
                nonce: "n1".into(),
                request: request_path(),
                termination_log: "/dev/termination-log".into(),
                program: vec!["/type".into(), "create".into()],
                done: None,
            },
            service_account: Some("deployer".into()),
            plugs,
            deadline: Duration::from_secs(900),
            labels: BTreeMap::from([(OWNER_LABEL.to_string(), "deployster".to_string())]),
            owner: None,
            run_as_user: Some(65532),
            options: PodOptions::default(),
        }
    }

    #[test]
    fn names_are_the_same_for_the_same_invocation_and_valid() {
        let name = pod_name("run-1", "web_db", "action:create", 0);
        assert_eq!(name, pod_name("run-1", "web_db", "action:create", 0));
        assert_ne!(name, pod_name("run-1", "web_db", "action:create", 1));
        assert_ne!(name, pod_name("run-2", "web_db", "action:create", 0));
        assert!(name.starts_with("dst-web-db-"), "{name}");
        let long = pod_name("r", &"Résource_".repeat(20), "state", 0);
        assert!(long.len() <= 63, "{long}");
        assert!(long.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{long}");
        assert!(!long.starts_with('-') && !long.ends_with('-'));
    }

    #[test]
    fn the_pod_is_restricted_runs_the_helper_and_mounts_what_it_should() {
        let plugs = vec![
            PodPlug {
                name: "creds".into(),
                container_path: "/creds".into(),
                source: PlugSource::Secret { name: "db".into(), key: Some("password".into()) },
            },
            PodPlug {
                name: "data".into(),
                container_path: "/data".into(),
                source: PlugSource::Claim { name: "pvc".into() },
            },
        ];
        let pod = pod(&invocation(plugs), "dst-request");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false), "the token is never mounted");
        assert_eq!(spec.service_account_name.as_deref(), Some("deployer"));
        assert_eq!(spec.active_deadline_seconds, Some(930), "a backstop behind the controller's own limit");
        assert_eq!(spec.security_context.as_ref().unwrap().run_as_non_root, Some(true));
        assert_eq!(spec.security_context.as_ref().unwrap().run_as_user, Some(65532));
        assert_eq!(spec.security_context.as_ref().unwrap().fs_group, Some(65532), "a claim is writable");
        assert_eq!(spec.security_context.as_ref().unwrap().run_as_group, Some(65532));
        let (helper, main) = (&spec.containers[0], &spec.containers[1]);
        let security = main.security_context.as_ref().unwrap();
        assert_eq!(
            (security.allow_privilege_escalation, security.read_only_root_filesystem),
            (Some(false), Some(true))
        );
        assert_eq!(security.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_string()][..]));
        let command = main.command.as_ref().unwrap();
        assert_eq!(command[..2], ["/.deployster/bin/deployster".to_string(), "__pod-entry".to_string()]);
        assert_eq!(command[command.len() - 2..], ["/type".to_string(), "create".to_string()]);
        let entry = HelperCommand::parse(&command[2..]).unwrap();
        assert_eq!(entry.request, request_path());
        assert_eq!(
            entry.done.as_deref(),
            Some(std::path::Path::new("/.deployster/bin/done")),
            "the helper waits for it"
        );
        assert_eq!(main.volume_mounts.as_ref().unwrap()[3].sub_path.as_deref(), Some("password"), "one key, one file");
        let mounts: Vec<(&str, &str, Option<bool>)> = main
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
            .collect();
        assert_eq!(
            mounts,
            [
                ("helper", "/.deployster/bin", Some(false)),
                ("request", "/.deployster/request", Some(true)),
                ("tmp", "/tmp", Some(false)),
                ("plug-creds", "/creds", Some(true)),
                ("plug-data", "/data", Some(false)),
            ]
        );
        assert!(spec.init_containers.is_none(), "this kubelet notices an init container's end a second late");
        assert_eq!(helper.image.as_deref(), Some("registry/deployster/controller:0.1.0"));
        assert_eq!(helper.command.as_ref().unwrap()[2..], ["--install".to_string(), "/.deployster/bin".to_string()]);
        let hook = helper.lifecycle.as_ref().unwrap().post_start.as_ref().unwrap().exec.as_ref().unwrap();
        assert_eq!(
            hook.command.as_ref().unwrap()[2..],
            ["--await-install".to_string(), "/.deployster/bin".to_string()],
            "the type's container starts once the helper is in place"
        );
        assert_eq!(helper.security_context, main.security_context);
        let serialized = serde_json::to_string(&spec).unwrap();
        assert!(!serialized.contains("\"env\""), "nothing of the request in the spec: {serialized}");
    }

    #[test]
    fn the_manifest_s_pod_options_reach_the_pod() {
        let options: PodOptions = serde_json::from_value(serde_json::json!({
            "resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "64Mi", "example.com/gpu": "1"}},
            "nodeSelector": {"pool": "deploy"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "deploy", "effect": "NoSchedule"}],
            "runAsNonRoot": false,
            "imagePullSecrets": [{"name": "regcred"}],
        }))
        .unwrap();
        let mut invocation = invocation(vec![]);
        invocation.options = options;
        let spec = pod(&invocation, "dst-request").spec.unwrap();
        let resources = spec.containers[1].resources.as_ref().unwrap();
        assert_eq!(resources.requests.as_ref().unwrap()["cpu"], Quantity("50m".into()));
        assert_eq!(resources.limits.as_ref().unwrap()["memory"], Quantity("64Mi".into()));
        assert_eq!(spec.node_selector.unwrap()["pool"], "deploy");
        assert_eq!(spec.tolerations.unwrap()[0].effect.as_deref(), Some("NoSchedule"));
        assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "regcred");
        assert_eq!(spec.security_context.unwrap().run_as_non_root, Some(false));
        let helper = spec.containers[0].resources.as_ref().unwrap();
        assert_eq!(helper.requests.as_ref().unwrap()["cpu"], Quantity("10m".into()), "a quota counts it too");
        assert_eq!(helper.limits.as_ref().unwrap()["memory"], Quantity("32Mi".into()));
        assert_eq!((helper.requests.as_ref().unwrap().len(), helper.limits.as_ref().unwrap().len()), (1, 1));
        let defaults = pod(&self::invocation(vec![]), "r").spec.unwrap();
        assert!(
            defaults.node_selector.is_none() && defaults.tolerations.is_none() && defaults.image_pull_secrets.is_none()
        );
    }

    #[test]
    fn the_request_travels_in_an_immutable_secret_owned_by_the_pod() {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "dst-web".into(),
            uid: "u1".into(),
            ..OwnerReference::default()
        };
        let env = [("TOKEN".to_string(), "s3cret".to_string())];
        let secret = request_secret(&invocation(vec![]), "dst-request", owner, b"{\"name\": \"web\"}", &env);
        assert_eq!(secret.immutable, Some(true));
        assert_eq!(secret.metadata.owner_references.unwrap()[0].uid, "u1");
        let data = secret.data.unwrap();
        assert_eq!(data[REQUEST_KEY].0, b"{\"name\": \"web\"}");
        assert_eq!(data[ENV_KEY].0, b"{\"TOKEN\":\"s3cret\"}", "the environment beside it, not in the Pod");
    }
}
