//! The fault-injecting proxy (`tests/aws/fault_proxy.py`) in front of the local AWS server,
//! for the tests of both crates (`local/tests/aws.rs`, `functions/tests/runtime.rs`, included
//! with `#[path]`).
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test support: not every test binary uses every item; a failed set-up should fail the test"
)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The fault proxy, stopped on drop.
pub struct Proxy {
    child: Child,
    /// The proxy's base URL: point `AWS_ENDPOINT_URL` at it.
    pub url: String,
}

impl Proxy {
    /// Start the proxy in front of `upstream` with `fault_proxy.py`'s flags (`--every N`,
    /// `--always`); it listens on a free loopback port.
    pub fn start(upstream: &str, args: &[&str]) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/aws/fault_proxy.py");
        let python = std::env::var("SKIPPR_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let child = Command::new(python)
            .arg(script)
            .arg(upstream)
            .arg(&port_file)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !port_file.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the fault proxy did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let port = std::fs::read_to_string(&port_file).unwrap();
        Proxy {
            child,
            url: format!("http://127.0.0.1:{}", port.trim()),
        }
    }

    /// (requests seen, faults injected).
    pub fn counts(&self) -> (u64, u64) {
        let out = Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import urllib.request;print(urllib.request.urlopen('{}/_faults').read().decode())",
                    self.url
                ),
            ])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            v["requests"].as_u64().unwrap(),
            v["faults"].as_u64().unwrap(),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
