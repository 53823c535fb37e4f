//! The network sandbox: one idle container whose network namespace every invocation container
//! joins (`network_mode: container:<id>`), as the containers of a Kubernetes pod join its pause
//! container.
//!
//! Creating a network namespace, a veth pair and its bridge rules is most of what starting a
//! container costs the daemon (measured here: ~310 ms per `docker run` with a network of its
//! own, ~125 ms joining a running one). Resource programs are short-lived clients of remote
//! APIs: they need a network, not one each. Containers in one sandbox share interfaces and
//! `localhost`; everything else (filesystem, processes, mounts) stays per container.
//!
//! No image can be assumed present, so the sandbox's image is made here: a one-file root
//! filesystem holding a static program of ~150 bytes that waits for signals forever, imported through
//! the Engine API and tagged by the hash of its content.

use std::collections::HashMap;

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use bollard::query_parameters::{CreateImageOptionsBuilder, StartContainerOptions};
use sha2::{Digest, Sha256};

use super::daemon::{DaemonError, image_progress, remove_container};
use super::{LABEL_OWNER, LABEL_PHASE};

/// The `deployster.io/phase` label of sandbox containers.
pub const SANDBOX_PHASE: &str = "sandbox";
/// The repository of the generated sandbox image; the tag is a hash of its content.
pub const SANDBOX_REPOSITORY: &str = "deployster/sandbox";
const PROGRAM_PATH: &str = "pause";

/// Where the program is loaded (the conventional base of a non-PIE executable).
const LOAD_ADDRESS: u64 = 0x40_0000;
const ELF_HEADER_SIZE: u16 = 64;
const PROGRAM_HEADER_SIZE: u16 = 56;

/// The machine code of the pause program for a Docker `Architecture` (as `uname -m` names it),
/// with its ELF `e_machine`. Both loop on a syscall that only a signal ends; as PID 1 of its
/// namespace the program has no handlers, so only SIGKILL stops it (its stop signal).
fn machine_code(architecture: &str) -> Option<(u16, Vec<u8>)> {
    match architecture {
        // loop: mov eax, 34 (pause); syscall; jmp loop
        "x86_64" | "amd64" => Some((62, vec![0xb8, 34, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7])),
        // loop: mov x0..x4, #0; mov x8, #73 (ppoll: no fds, no timeout); svc #0; b loop
        "aarch64" | "arm64" => {
            let words: [u32; 8] = [
                0xd280_0000,
                0xd280_0001,
                0xd280_0002,
                0xd280_0003,
                0xd280_0004,
                0xd280_0928,
                0xd400_0001,
                0x17ff_fff9,
            ];
            Some((183, words.iter().flat_map(|w| w.to_le_bytes()).collect()))
        }
        _ => None,
    }
}

/// A minimal static ELF64 executable: a header, one loadable segment (the whole file, read and
/// execute), and the code right after the headers, where execution starts.
pub fn pause_program(architecture: &str) -> Option<Vec<u8>> {
    let (machine, code) = machine_code(architecture)?;
    let headers = u64::from(ELF_HEADER_SIZE + PROGRAM_HEADER_SIZE);
    let size = headers + code.len() as u64;
    let mut elf = Vec::with_capacity(size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type: executable
    elf.extend_from_slice(&machine.to_le_bytes());
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&(LOAD_ADDRESS + headers).to_le_bytes()); // e_entry
    elf.extend_from_slice(&u64::from(ELF_HEADER_SIZE).to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff: no sections
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    elf.extend_from_slice(&ELF_HEADER_SIZE.to_le_bytes());
    elf.extend_from_slice(&PROGRAM_HEADER_SIZE.to_le_bytes());
    elf.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    elf.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
    elf.extend_from_slice(&1u32.to_le_bytes()); // p_type: PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // p_flags: read + execute
    elf.extend_from_slice(&0u64.to_le_bytes()); // p_offset
    elf.extend_from_slice(&LOAD_ADDRESS.to_le_bytes()); // p_vaddr
    elf.extend_from_slice(&LOAD_ADDRESS.to_le_bytes()); // p_paddr
    elf.extend_from_slice(&size.to_le_bytes()); // p_filesz
    elf.extend_from_slice(&size.to_le_bytes()); // p_memsz
    elf.extend_from_slice(&0x1000u64.to_le_bytes()); // p_align
    debug_assert_eq!(elf.len() as u64, headers);
    elf.extend_from_slice(&code);
    Some(elf)
}

/// The sandbox image for the daemon's architecture, imported when absent. `Ok(None)` when there
/// is no pause program for that architecture.
pub async fn ensure_image(docker: &Docker) -> Result<Option<String>, DaemonError> {
    let info = docker.info().await?;
    let architecture = info.architecture.unwrap_or_default();
    let Some(program) = pause_program(&architecture) else {
        return Ok(None);
    };
    let digest = Sha256::digest(&program);
    let tag: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let reference = format!("{SANDBOX_REPOSITORY}:{tag}");
    match docker.inspect_image(&reference).await {
        Ok(_) => return Ok(Some(reference)),
        Err(DockerError::DockerResponseServerError { status_code: 404, .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(SANDBOX_REPOSITORY)
        .tag(&tag)
        .changes(vec![format!(r#"CMD ["/{PROGRAM_PATH}"]"#)])
        .message("deployster network sandbox")
        .build();
    let body = bollard::body_full(root_filesystem(&program).into());
    image_progress(docker.create_image(Some(options), Some(body), None)).await?;
    Ok(Some(reference))
}

/// A tar archive holding only the program, executable by all.
fn root_filesystem(program: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.set_size(program.len() as u64);
    header.set_mode(0o755);
    header.set_cksum();
    let mut archive = tar::Builder::new(Vec::new());
    archive.append_data(&mut header, PROGRAM_PATH, program).expect("writing to memory cannot fail");
    archive.into_inner().expect("writing to memory cannot fail")
}

/// Creates and starts a sandbox container of `image`; returns its ID. It has the daemon's
/// default network, so the programs that join it reach what that network reaches.
pub async fn start(docker: &Docker, image: &str, owner: &str) -> Result<String, DaemonError> {
    let labels = HashMap::from([
        (LABEL_OWNER.to_string(), owner.to_string()),
        (LABEL_PHASE.to_string(), SANDBOX_PHASE.to_string()),
    ]);
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        labels: Some(labels),
        stop_signal: Some("SIGKILL".into()),
        host_config: Some(HostConfig {
            log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let id = docker.create_container(None, body).await?.id;
    if let Err(e) = docker.start_container(&id, None::<StartContainerOptions>).await {
        remove_container(docker, &id).await;
        return Err(e.into());
    }
    Ok(id)
}

/// Whether the container `id` exists and runs.
pub async fn is_running(docker: &Docker, id: &str) -> bool {
    match docker.inspect_container(id, None).await {
        Ok(inspect) => inspect.state.and_then(|s| s.running).unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_program_is_a_well_formed_elf_for_each_supported_architecture() {
        for (arch, machine, code_len) in [("x86_64", 62u16, 9usize), ("aarch64", 183, 32)] {
            let elf = pause_program(arch).unwrap();
            assert_eq!(&elf[..4], b"\x7fELF");
            assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), machine, "{arch}");
            assert_eq!(elf.len(), 120 + code_len, "{arch}");
            let entry = u64::from_le_bytes(elf[24..32].try_into().unwrap());
            assert_eq!(entry, LOAD_ADDRESS + 120, "{arch}: starts right after the headers");
            let file_size = u64::from_le_bytes(elf[64 + 32..64 + 40].try_into().unwrap());
            assert_eq!(file_size, elf.len() as u64, "{arch}: the segment covers the file");
        }
        assert_eq!(pause_program("amd64"), pause_program("x86_64"));
        assert!(pause_program("s390x").is_none());
    }

    #[test]
    fn the_root_filesystem_holds_the_program_executable() {
        let program = pause_program("x86_64").unwrap();
        let archive = root_filesystem(&program);
        let mut reader = tar::Archive::new(archive.as_slice());
        let entries: Vec<_> = reader
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut content = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut content).unwrap();
                (e.path().unwrap().display().to_string(), e.header().mode().unwrap(), content)
            })
            .collect();
        assert_eq!(entries, vec![(PROGRAM_PATH.to_string(), 0o755, program)]);
    }

    /// Runs the pause program for `arch` (natively, or under `runner`): it must still run after
    /// a while and end by SIGKILL only.
    fn waits_until_killed(arch: &str, runner: Option<&str>) {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::ExitStatusExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("pause-{arch}"));
        std::fs::write(&path, pause_program(arch).unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut command = match runner {
            Some(runner) => std::process::Command::new(runner),
            None => std::process::Command::new(&path),
        };
        if runner.is_some() {
            command.arg(&path);
        }
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot run the {arch} pause program: {e}"));
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(child.try_wait().unwrap().is_none(), "{arch}: the pause program ended by itself");
        child.kill().unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(9), "{arch}");
    }

    #[test]
    fn the_pause_program_waits_until_killed_here() {
        match std::env::consts::ARCH {
            arch @ ("x86_64" | "aarch64") => waits_until_killed(arch, None),
            other => panic!("no pause program for this machine ({other}): add one to machine_code"),
        }
    }

    /// The other architecture's program under qemu user emulation (Debian's `qemu-user`, which
    /// `.ci/run` installs); without it the test fails.
    #[ignore = "needs qemu-user: apt-get install qemu-user; cargo test --lib under_qemu -- --include-ignored"]
    #[test]
    fn the_pause_program_of_the_other_architecture_waits_until_killed_under_qemu() {
        let other = if std::env::consts::ARCH == "x86_64" { "aarch64" } else { "x86_64" };
        let runner = format!("qemu-{other}");
        let found = std::process::Command::new(&runner).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(found, "this test needs {runner} (Debian's qemu-user)");
        waits_until_killed(other, Some(&runner));
    }
}
