//! Which executor answers an invocation, decided in one place ([`route`]): `builtin/kubernetes`,
//! the built-ins answered in this process, programs started here, images. Each entry answers
//! what it is handed and routes nothing on.

use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::executor::{ExecError, Executor, Invocation, Outcome, host_mounts_only};
use crate::engine::typeref::{ImageRef, TypeRef};

/// The kinds of executor a pass's stack has, one per kind of type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `builtin/kubernetes`, answered here with the API server's answers.
    Kubernetes,
    /// A built-in answered in this process, without a program (all but `builtin/package`'s
    /// scripts, which need a process of their own).
    InProcess,
    /// A program started on this machine: a local path, or a built-in as `deployster __type`.
    Program,
    /// Where images run (Docker, or Pods) — in a cluster, with the file built-ins' state and
    /// actions.
    Images,
}

/// Where `invocation` goes, given whether file built-ins run where images do (a controller in a
/// cluster, [`TypeRef::is_file_builtin`]): their init, the same answer for every resource,
/// stays here.
pub fn route(invocation: &Invocation, builtins_with_images: bool) -> Route {
    let verb = !invocation.args.is_empty();
    match &invocation.program {
        TypeRef::Image(_) => Route::Images,
        TypeRef::Local(_) => Route::Program,
        TypeRef::Builtin(_) if invocation.entrypoint.is_some() => Route::Program,
        builtin if builtins_with_images && builtin.is_file_builtin() && verb => Route::Images,
        TypeRef::Builtin(name) if name == crate::builtins::KUBERNETES => Route::Kubernetes,
        TypeRef::Builtin(name) if crate::builtins::runs_in_process(name, &invocation.args) => Route::InProcess,
        TypeRef::Builtin(_) => Route::Program,
    }
}

/// A pass's executors by [`Route`]. An entry that is not there falls back to programs
/// (`builtin/kubernetes` in a build without the kube feature, built-ins as programs with
/// `DEPLOYSTER_BUILTINS=process`), but images, which nothing else can run.
pub struct Router {
    pub kubernetes: Option<Arc<dyn Executor>>,
    pub in_process: Option<Arc<dyn Executor>>,
    pub programs: Arc<dyn Executor>,
    /// `None` when this build or configuration has no image executor.
    pub images: Option<Arc<dyn Executor>>,
    /// Whether local program paths may run. The controller refuses them by default: whoever
    /// can create a Manifest must not gain code execution in the controller.
    pub local_programs: bool,
    /// Whether the state and actions of the file built-ins run where images do ([`route`]).
    pub builtins_with_images: bool,
}

impl Router {
    /// Everything as programs, images nowhere, every program allowed: what the other entries
    /// are added to (`Router { in_process, ..Router::programs(p) }`).
    pub fn programs(programs: Arc<dyn Executor>) -> Router {
        Router {
            kubernetes: None,
            in_process: None,
            programs,
            images: None,
            local_programs: true,
            builtins_with_images: false,
        }
    }

    /// The executor of `route`, or why there is none.
    fn entry(&self, route: Route, program: &TypeRef) -> Result<&Arc<dyn Executor>, ExecError> {
        match (route, program) {
            (Route::Images, TypeRef::Image(image)) => self.images.as_ref().ok_or_else(|| no_image_executor(image)),
            (Route::Images, _) => self.images.as_ref().ok_or_else(|| {
                ExecError::Unavailable(format!("{program} runs where images do here, and nothing runs images"))
            }),
            (Route::Kubernetes, _) => Ok(self.kubernetes.as_ref().unwrap_or(&self.programs)),
            (Route::InProcess, _) => Ok(self.in_process.as_ref().unwrap_or(&self.programs)),
            (Route::Program, TypeRef::Local(path)) if !self.local_programs => Err(ExecError::Unavailable(format!(
                "local programs are refused here ({}); use builtin/<name> or a Docker image",
                path.display()
            ))),
            (Route::Program, _) => Ok(&self.programs),
        }
    }

    /// Every entry there is, once.
    fn entries(&self) -> impl Iterator<Item = &Arc<dyn Executor>> {
        [self.kubernetes.as_ref(), self.in_process.as_ref(), Some(&self.programs), self.images.as_ref()]
            .into_iter()
            .flatten()
    }
}

fn no_image_executor(image: &ImageRef) -> ExecError {
    ExecError::Unavailable(format!(
        "Docker executor not available: `{image}` is a Docker image, and this deployster was built \
         without the `docker` feature (use builtin/<name> or a local program path)"
    ))
}

#[async_trait]
impl Executor for Router {
    /// Each entry checks the types it will be handed (an unreachable Docker engine is one error,
    /// not one per resource); refused local programs are said at their call, which names the
    /// resource.
    async fn preflight(&self, programs: &[TypeRef]) -> Result<(), ExecError> {
        for kind in [Route::Kubernetes, Route::InProcess, Route::Program, Route::Images] {
            let init = |program: &TypeRef| Invocation::new(program.clone(), Default::default());
            let mine: Vec<TypeRef> = programs
                .iter()
                .filter(|program| route(&init(program), self.builtins_with_images) == kind)
                .filter(|program| self.local_programs || !matches!(program, TypeRef::Local(_)))
                .cloned()
                .collect();
            if let Some(first) = mine.first() {
                self.entry(kind, first)?.preflight(&mine).await?;
            }
        }
        Ok(())
    }

    fn starts_program(&self, invocation: &Invocation) -> bool {
        let route = route(invocation, self.builtins_with_images);
        self.entry(route, &invocation.program).is_ok_and(|entry| entry.starts_program(invocation))
    }

    async fn invoke(&self, invocation: Invocation) -> Result<Outcome, ExecError> {
        let route = route(&invocation, self.builtins_with_images);
        let entry = self.entry(route, &invocation.program)?;
        if route != Route::Images {
            host_mounts_only(&invocation)?;
        }
        entry.invoke(invocation).await
    }

    async fn stop_run(&self, run_id: &str) -> Result<usize, ExecError> {
        let mut stopped = 0;
        for entry in self.entries() {
            stopped += entry.stop_run(run_id).await?;
        }
        Ok(stopped)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::executor::fake::{FakeCall, FakeExecutor, FakeReply};

    fn fake() -> Arc<FakeExecutor> {
        Arc::new(FakeExecutor::new(|_| FakeReply::default()))
    }

    fn call(program: TypeRef, args: &[&str]) -> Invocation {
        let mut invocation = Invocation::new(program, Duration::from_secs(1));
        invocation.args = args.iter().map(|a| a.to_string()).collect();
        invocation
    }

    fn builtin(name: &str, args: &[&str]) -> Invocation {
        call(TypeRef::Builtin(name.into()), args)
    }

    fn args(calls: Vec<FakeCall>) -> Vec<String> {
        calls.into_iter().map(|c| c.args.join(" ")).collect()
    }

    #[test]
    fn each_kind_of_type_has_one_route() {
        let image = TypeRef::parse("registry.local:5000/acme/vm:1.2", std::path::Path::new("/")).unwrap();
        let cases = [
            (builtin("kubernetes", &["state"]), false, Route::Kubernetes),
            (builtin("kubernetes", &[]), true, Route::Kubernetes),
            (builtin("file", &["state"]), false, Route::InProcess),
            (builtin("file", &[]), true, Route::InProcess),
            (builtin("file", &["state"]), true, Route::Images),
            (builtin("directory", &["create"]), true, Route::Images),
            (builtin("package", &[]), false, Route::InProcess),
            (builtin("package", &["install"]), false, Route::Program),
            (Invocation { entrypoint: Some("/x".into()), ..builtin("file", &["state"]) }, false, Route::Program),
            (call(TypeRef::Local("/bin/x".into()), &["state"]), true, Route::Program),
            (call(image, &[]), false, Route::Images),
        ];
        for (invocation, in_cluster, expected) in cases {
            assert_eq!(route(&invocation, in_cluster), expected, "{:?} {:?}", invocation.program, invocation.args);
        }
    }

    #[tokio::test]
    async fn without_an_image_executor_images_fail_once_with_a_clear_message() {
        let programs = fake();
        let router = Router::programs(programs.clone());
        let image = TypeRef::parse("registry.local:5000/acme/vm:1.2", std::path::Path::new("/")).unwrap();
        let err = router.preflight(&[TypeRef::Builtin("file".into()), image]).await.unwrap_err();
        assert_eq!(err.reason(), "ExecutorUnavailable");
        let text = err.to_string();
        assert!(text.contains("`registry.local:5000/acme/vm:1.2` is a Docker image"), "{text}");
        assert!(text.contains("without the `docker` feature"), "{text}");
        assert!(router.preflight(&[TypeRef::Builtin("file".into())]).await.is_ok());
        assert!(programs.calls().is_empty());
    }

    #[tokio::test]
    async fn in_a_cluster_file_built_ins_run_where_images_do_but_for_init() {
        let (programs, in_process, kubernetes, images) = (fake(), fake(), fake(), fake());
        let router = Router {
            kubernetes: Some(kubernetes.clone()),
            in_process: Some(in_process.clone()),
            images: Some(images.clone()),
            builtins_with_images: true,
            ..Router::programs(programs.clone())
        };
        for (name, verb) in [("file", &["state"][..]), ("directory", &["create"]), ("file", &["delete"])] {
            assert!(router.starts_program(&builtin(name, verb)), "{name} {verb:?} starts a Pod");
            router.invoke(builtin(name, verb)).await.unwrap();
        }
        for (name, verb) in [("file", &[][..]), ("directory", &[]), ("kubernetes", &["state"]), ("package", &["state"])]
        {
            router.invoke(builtin(name, verb)).await.unwrap();
        }
        assert_eq!(args(images.calls()), ["state", "create", "delete"]);
        assert_eq!(args(in_process.calls()), ["", ""], "the file built-ins' inits stay");
        assert_eq!(args(kubernetes.calls()), ["state"]);
        assert_eq!(args(programs.calls()), ["state"], "package's scripts run as programs");
        // Beside deployster (the CLI), every built-in stays.
        let beside =
            Router { in_process: Some(in_process.clone()), images: Some(images.clone()), ..Router::programs(programs) };
        beside.invoke(builtin("file", &["state"])).await.unwrap();
        assert_eq!(images.calls().len(), 3);
        assert_eq!(in_process.calls().len(), 3);
    }

    #[tokio::test]
    async fn a_missing_entry_falls_back_to_programs() {
        let programs = fake();
        let router = Router::programs(programs.clone());
        router.invoke(builtin("kubernetes", &["state"])).await.unwrap();
        router.invoke(builtin("file", &["state"])).await.unwrap();
        assert_eq!(programs.calls().len(), 2);
    }

    #[tokio::test]
    async fn local_programs_can_be_refused() {
        let programs = fake();
        let router = Router { local_programs: false, ..Router::programs(programs.clone()) };
        let local = TypeRef::Local("/bin/evil".into());
        assert!(
            router.preflight(std::slice::from_ref(&local)).await.is_ok(),
            "said at the call, which names the resource"
        );
        let err = router.invoke(call(local, &[])).await.unwrap_err();
        assert!(err.to_string().contains("local programs are refused here (/bin/evil)"), "{err}");
        assert!(router.invoke(builtin("file", &[])).await.is_ok());
        assert_eq!(programs.calls().len(), 1, "only the built-in ran");
    }
}
