//! The calling thread's CPU affinity (`sched_getaffinity` / `sched_setaffinity`).

use std::io;

use super::cpulist::MAX_CPU;

/// The CPUs the calling thread may run on (at start, the process's), sorted.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed `cpu_set_t` is an empty set; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `CPU_ISSET` reads `set` at an index below its capacity.
    Ok((0..=MAX_CPU).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Pins the calling thread to `cpus` (each at most [`MAX_CPU`], as the lists parsed are).
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed `cpu_set_t` is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&c| c <= MAX_CPU) {
        // SAFETY: `cpu` is below the set's capacity (1024).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_allowed_cpu_reports_only_it() {
        let allowed = allowed_cpus().expect("sched_getaffinity");
        assert!(!allowed.is_empty());
        let last = *allowed.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_current_thread(&[last]).expect("sched_setaffinity");
            allowed_cpus().expect("sched_getaffinity")
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![last]);
        assert_eq!(allowed_cpus().unwrap(), allowed, "only the pinned thread changed");
    }
}
