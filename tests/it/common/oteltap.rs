//! oteltap (`KILN_TEST_OTELTAP`) listening on a port and printing every metric it receives as
//! one NDJSON line into a file; killed when dropped.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

pub struct Oteltap {
    child: Child,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Oteltap {
    /// Starts oteltap on `port` and waits until it listens.
    pub fn start(port: u16) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("oteltap.ndjson");
        let file = std::fs::File::create(&out).expect("output file");
        let child = Command::new(super::tool("KILN_TEST_OTELTAP"))
            .env("PYTHONUNBUFFERED", "1")
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("start oteltap");
        let tap = Self { child, out, _dir: dir };
        super::wait::wait_until("oteltap to listen", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        tap
    }

    /// Everything received so far.
    pub fn received(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Oteltap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
