//! The `deployster` binary: parses the command line, sets up logging, runs the command and maps
//! the result to the documented exit codes (0 ok, 1 failed resources, 2 invalid input/usage).
#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use deployster::cli::{self, Command};
use deployster::engine::executor::process;

/// jemalloc rather than the system's malloc: a controller holds thousands of objects and
/// allocates afresh on every pass; `cargo bench --bench controller` measured a pass over 10,000
/// Manifests with 15–25 % less CPU and 5 % less memory.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Logs on stderr, filtered by `DEPLOYSTER_LOG` (default: warnings; the controller: info), as
/// JSON for `deployster controller --log-format json`.
fn init_logging(cli: &cli::Cli) {
    #[cfg(feature = "kube")]
    let (default, json) = match &cli.command {
        Command::Controller(args) => ("info", args.log_format == cli::LogFormat::Json),
        _ => ("warn", false),
    };
    #[cfg(not(feature = "kube"))]
    let (default, json) = {
        let _ = cli;
        ("warn", false)
    };
    // kube's client warns of every error answer that is not a Status ("Unsuccessful data error
    // parse: 404 page not found", a CRD not installed): the error is returned all the same, and
    // said by us, with its cure, where it matters. Its own warnings are kept off by default.
    let default = format!("{default},kube_client::client=error");
    let filter = tracing_subscriber::EnvFilter::try_from_env("DEPLOYSTER_LOG").unwrap_or_else(|_| default.into());
    // Colour codes only for a terminal: not in files, CI logs or a collector's pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == process::REAPER_SUBCOMMAND) {
        // What kills deployster's programs when it dies: as little as possible around it.
        return ExitCode::from(u8::try_from(process::reap(std::io::stdin().lock())).unwrap_or(1));
    }
    if argv.get(1).is_some_and(|a| a == deployster::pod_helper::entry::ENTRY_SUBCOMMAND) {
        // In front of a resource type's program in its Pod: no logging set-up, no CLI.
        let args: Vec<String> = argv[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
        return ExitCode::from(u8::try_from(deployster::pod_helper::entry::main(&args)).unwrap_or(1));
    }
    if argv.get(1).is_some_and(|a| a == deployster::pod_helper::serve::SERVE_SUBCOMMAND) {
        // One invocation in a warm runner, exec'd into it: as little as the Pod's helper.
        let args: Vec<String> = argv[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
        return ExitCode::from(u8::try_from(deployster::pod_helper::serve::main(&args)).unwrap_or(1));
    }
    let cli = cli::parse();
    if let Command::BuiltinType { name, args } = &cli.command {
        // Built-in types are resource programs: no runtime, no logging set-up, just the protocol.
        return ExitCode::from(u8::try_from(deployster::builtins::main(name, args)).unwrap_or(1));
    }
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            // Every error's message already carries its cause; printing the source chain too
            // would repeat it.
            // Not eprintln!: a closed stderr must not turn a clean error into a panic.
            let _ = writeln!(std::io::stderr(), "error: {error}");
            ExitCode::from(error.exit().code())
        }
    }
}
