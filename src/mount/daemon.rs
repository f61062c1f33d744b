//! Daemon mode: the process forks *before* any thread exists (no tokio runtime yet), the child
//! detaches (new session, `/`, standard streams to /dev/null), mounts and reports through a
//! pipe: the parent exits 0 only once the mount is live, or prints the child's reason and
//! exits 1 — so `mount -t fuse.zarrfs`, fstab and scripts learn the outcome from the exit code.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::logging::{init_logging, message, LogFormat};
use super::serve::serve;
use super::settings::MountSettings;

pub(crate) fn daemonize(settings: MountSettings) -> Result<()> {
    let (reader, writer) = nix::unistd::pipe().context("pipe")?;
    // SAFETY: no other thread exists yet: no runtime has been built and nothing else spawns.
    match unsafe { nix::unistd::fork() }.context("fork")? {
        nix::unistd::ForkResult::Parent { .. } => {
            drop(writer);
            wait_for_child(reader)
        }
        nix::unistd::ForkResult::Child => {
            drop(reader);
            let code = match daemon_child(&settings, writer) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("{}", message(&e));
                    1
                }
            };
            std::process::exit(code);
        }
    }
}

fn wait_for_child(reader: OwnedFd) -> Result<()> {
    let mut message = String::new();
    std::fs::File::from(reader).read_to_string(&mut message).ok();
    match message.strip_prefix("ok") {
        Some(_) => Ok(()),
        None if message.is_empty() => bail!("the daemon exited before the mount was live"),
        None => bail!("{}", message.trim_start_matches("error: ").trim()),
    }
}

fn daemon_child(settings: &MountSettings, writer: OwnedFd) -> Result<()> {
    let mut pipe = std::fs::File::from(writer);
    if let Err(e) = detach(settings.log_file.as_deref(), settings.log_format) {
        let _ = write!(pipe, "error: {}", message(&e));
        return Err(e);
    }
    serve(settings, move |outcome| {
        let _ = match outcome {
            Ok(()) => write!(pipe, "ok"),
            Err(message) => write!(pipe, "error: {message}"),
        };
        drop(pipe);
    })
}

/// New session, working directory `/`, standard streams to /dev/null, logging to the log file.
fn detach(log_file: Option<&Path>, log_format: LogFormat) -> Result<()> {
    nix::unistd::setsid().context("setsid")?;
    std::env::set_current_dir("/")?;
    let null = OpenOptions::new().read(true).write(true).open("/dev/null")?;
    for fd in [0, 1, 2] {
        // SAFETY: dup2 onto the standard descriptors of this single-threaded child.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            bail!("dup2: {}", std::io::Error::last_os_error());
        }
    }
    match log_file {
        Some(path) => init_logging(Some(path), log_format),
        None => Ok(()),
    }
}
