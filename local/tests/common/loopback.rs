//! Helper servers on loopback started from the Python scripts under `tests/` (the fault proxy
//! in front of the local AWS server, the Lambda Runtime API emulator), for the tests of both
//! crates (`local/tests/aws.rs`, `functions/tests/runtime.rs`, included with `#[path]`).
#![allow(
    dead_code,
    clippy::unwrap_used,
    reason = "test support: not every test binary uses every item; a failed set-up should fail the test"
)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A helper server run from a Python script under `tests/` that listens on a free loopback
/// port and writes the port to a file it is given; stopped on drop.
pub struct ScriptServer {
    child: Child,
    /// The port it listens on.
    pub port: u16,
}

impl ScriptServer {
    /// Run `script` (relative to the repository root) with `leading` arguments, the port
    /// file, then `trailing` ones, and wait until it has written its port.
    pub fn start(script: &str, leading: &[&str], trailing: &[&str]) -> ScriptServer {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(script);
        let python = std::env::var("SKIPPR_TEST_PYTHON")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "python3".into());
        let child = Command::new(python)
            .arg(&script)
            .args(leading)
            .arg(&port_file)
            .args(trailing)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // Owned from here, so a failure below stops it.
        let mut server = ScriptServer { child, port: 0 };
        let started = Instant::now();
        loop {
            let written = std::fs::read_to_string(&port_file).unwrap_or_default();
            if let Ok(port) = written.trim().parse() {
                server.port = port;
                return server;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{} did not start",
                script.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ScriptServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fault proxy (`tests/aws/fault_proxy.py`), stopped on drop.
pub struct Proxy {
    _server: ScriptServer,
    /// The proxy's base URL: point `AWS_ENDPOINT_URL` at it.
    pub url: String,
}

impl Proxy {
    /// Start the proxy in front of `upstream` with `fault_proxy.py`'s flags (`--every N`,
    /// `--always`, `--apply-then-fail OPS`); it listens on a free loopback port.
    pub fn start(upstream: &str, args: &[&str]) -> Proxy {
        let server = ScriptServer::start("tests/aws/fault_proxy.py", &[upstream], args);
        let url = format!("http://127.0.0.1:{}", server.port);
        Proxy {
            _server: server,
            url,
        }
    }

    /// (requests seen, faults injected).
    pub fn counts(&self) -> (u64, u64) {
        let v = self.report();
        (
            v["requests"].as_u64().unwrap(),
            v["faults"].as_u64().unwrap(),
        )
    }

    /// The proxy's whole `GET /_faults` report (with `--apply-then-fail`, the faults per op
    /// under `applied_then_failed`).
    pub fn report(&self) -> Value {
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
        serde_json::from_slice(&out.stdout).unwrap()
    }
}
