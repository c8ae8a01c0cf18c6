//! A fault-injection point for tests of the real process: while the file named by
//! `KILN_TESTING_HOLD_LOAD_WHILE` exists, `kiln serve` holds its model load, so a test can
//! observe what the server answers during loading and then let it finish by deleting the
//! file. Built only with the `testing` feature.

use std::path::Path;
use std::time::Duration;

/// The environment variable naming the gate file.
pub const HOLD_LOAD_WHILE_ENV: &str = "KILN_TESTING_HOLD_LOAD_WHILE";

/// Blocks the loading thread while the gate file exists.
pub fn hold_load_while_gated() {
    let Some(gate) = std::env::var_os(HOLD_LOAD_WHILE_ENV) else {
        return;
    };
    tracing::warn!(gate = ?gate, "testing: holding the model load while the gate file exists");
    while Path::new(&gate).exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
}
