//! The one way the integration tests wait for what nothing can tell them directly (a gauge,
//! a log line, a process's exit, another program's view): check the condition, back off
//! between checks so a loaded 2-CPU machine is not hammered, and fail at a generous deadline
//! naming what was awaited and what was last seen. A condition that holds ends the wait at
//! once; the deadline only bounds one that never will.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How long a condition may take to hold before the test fails: far more than any of them
/// takes, even on a loaded CI machine.
pub const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// The first pause between checks, and the longest: each pause doubles up to it.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// Checks `probe` until it returns `Ok`, within [`WAIT_LIMIT`]; panics with `what` and the
/// last `Err` (what was seen instead) at the deadline.
pub fn wait_for<T, E: Display>(what: &str, probe: impl FnMut() -> Result<T, E>) -> T {
    wait_for_within(what, WAIT_LIMIT, probe)
}

/// [`wait_for`] with its own deadline (a test that must see the condition sooner).
pub fn wait_for_within<T, E: Display>(what: &str, within: Duration, mut probe: impl FnMut() -> Result<T, E>) -> T {
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match probe() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        let now = Instant::now();
        if now >= deadline {
            panic!("{what}: not within {within:?}; last seen:\n{seen}");
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// Checks a condition that has nothing to show but true or false.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    wait_for(what, || if condition() { Ok(()) } else { Err("false") })
}
