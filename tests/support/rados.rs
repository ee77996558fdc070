//! Storage in the Ceph cluster named by `CEPH_CONF` (pool `ACKSTORE_RADOS_POOL`, default
//! `ackstore`), for the tests built with the `rados` feature. Each call gets a namespace no
//! other test (or earlier run) uses, so tests share one cluster without seeing each other.

#![cfg(feature = "rados")]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ackstore::{RadosCluster, RadosStorage};

/// The pool the tests use.
pub fn pool() -> String {
    std::env::var("ACKSTORE_RADOS_POOL").unwrap_or_else(|_| "ackstore".into())
}

/// The configuration file of the test cluster; a test built with the feature and run without a
/// cluster fails here, saying what to start.
pub fn conf() -> String {
    std::env::var("CEPH_CONF").expect(
        "CEPH_CONF must name a running cluster's ceph.conf for the rados tests \
         (scripts/ceph/start-cluster.sh DIR prints it)",
    )
}

/// The `rados` command line on the test cluster, in namespace `namespace`.
pub fn rados_cli(namespace: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("rados")
        .args(["-c", &conf(), "-p", &pool(), "-N", namespace])
        .args(args)
        .output()
        .expect("run the rados command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One connection per test process.
pub fn cluster() -> &'static RadosCluster {
    static CLUSTER: OnceLock<RadosCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RadosCluster::connect(conf()).expect("connect to the test cluster"))
}

/// A namespace name no other call, in this process or another, returns.
pub fn fresh_namespace(what: &str) -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{what}-{}-{nanos}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Storage in a fresh namespace of the test pool.
pub fn fresh_storage(what: &str) -> RadosStorage {
    cluster()
        .storage(&pool(), &fresh_namespace(what))
        .expect("open a namespace of the test pool")
}

/// The environment variable that makes a test binary, re-run as a child, play a broker role.
pub const BROKER_ROLE: &str = "ACKSTORE_BROKER_ROLE";
/// What a broker child prints before each line meant for its parent (the test harness prints
/// its own lines on the same stdout).
const BROKER_SAYS: &str = "broker: ";

/// The role this process plays, when it is a broker child of a test.
pub fn broker_role() -> Option<String> {
    std::env::var(BROKER_ROLE).ok()
}

/// In a broker child: tells the parent `line`.
pub fn tell(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{BROKER_SAYS}{line}").expect("write to the parent");
    out.flush().expect("write to the parent");
}

/// In a broker child: waits for the parent's next line (`None` once the parent is gone).
pub fn heard() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

/// A broker process: this test binary re-run as the single test `test` in role `role`, talking
/// to the test line by line (its stdin, and the lines of its stdout that [`tell`] wrote).
/// Killed when dropped.
pub struct Broker {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    heard: Vec<String>,
}

impl Broker {
    /// Starts the broker with the extra environment `env`.
    pub fn spawn(test: &str, role: &str, env: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        use std::process::Stdio;
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = crate::support::harness::child_showing(&exe, test)
            .env(BROKER_ROLE, role)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a broker process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // The harness may have started the line (`test NAME ... `).
                if let Some((_, said)) = line.split_once(BROKER_SAYS)
                    && send.send(said.to_owned()).is_err()
                {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            heard: Vec::new(),
        }
    }

    /// Tells the broker `line`.
    pub fn say(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("the broker's stdin");
        writeln!(stdin, "{line}").expect("write to the broker");
        stdin.flush().expect("write to the broker");
    }

    /// The broker's next line starting with `prefix`, waiting at most `within` for it (a
    /// guard against a hang, not a timing claim); panics with what it said otherwise.
    pub fn expect(&mut self, prefix: &str, within: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.heard.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "the broker did not say `{prefix}...` ({e}); it said {:?}",
                    self.heard
                ),
            }
        }
    }

    /// Sends the signal `signal` (`STOP`, `CONT`, `KILL`, ...) to the broker.
    pub fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Every line the broker said, in order: those [`Broker::expect`] went through, then the
    /// rest until its output ends (once it is killed or has exited).
    pub fn heard_all(&mut self) -> Vec<String> {
        self.stdin.take();
        self.heard.extend(self.lines.iter());
        self.heard.clone()
    }

    /// Kills the broker (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
