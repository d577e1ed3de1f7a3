//! A child process of a tool: started with its output to a log file, stopped (SIGTERM,
//! SIGKILL after a grace period), killed (`kill -9`), and SIGKILL-ed whenever the tool
//! ends without stopping it: on an error path, a panic (drop), or the tool's own death
//! (`PR_SET_PDEATHSIG`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running child; killed (SIGKILL) when dropped without [`Process::stop`].
pub struct Process {
    child: Child,
    /// The child's process id.
    pub pid: u32,
    /// The file its stdout and stderr are appended to.
    pub log: PathBuf,
    stopped: bool,
}

impl Process {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(mut cmd: Command, log: &Path) -> Result<Process, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let file2 = file.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(file2));
        // SAFETY: prctl is async-signal-safe; between fork and exec it only asks the
        // kernel to SIGKILL the child when this process (the thread that forked it) dies,
        // so a killed tool leaves no child behind.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
        Ok(Process {
            pid: child.id(),
            child,
            log: log.to_path_buf(),
            stopped: false,
        })
    }

    /// `None` while running; its exit status once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then up to `grace` for it to exit, then SIGKILL. Its exit status (a
    /// signal when it had to be killed), how long it took, and whether it was killed.
    pub fn stop(&mut self, grace: Duration) -> (Option<ExitStatus>, Duration, bool) {
        let t = Instant::now();
        self.stopped = true;
        if let Some(status) = self.exited() {
            return (Some(status), Duration::ZERO, false);
        }
        self.signal(libc::SIGTERM);
        while t.elapsed() < grace {
            if let Some(status) = self.exited() {
                return (Some(status), t.elapsed(), false);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        (self.child.wait().ok(), t.elapsed(), true)
    }

    /// `kill -9`: no chance to flush or close anything.
    pub fn kill9(&mut self) -> Option<ExitStatus> {
        self.stopped = true;
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, ...) to the child while it runs.
    pub fn signal(&mut self, signal: libc::c_int) {
        if self.exited().is_none() {
            // SAFETY: kill(2) on our own child's pid, which has not been reaped (try_wait
            // above saw it running), so the pid cannot have been reused.
            unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        }
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
