//! Which instruction set the kernels use: the best this CPU has (AVX-512F, then AVX2 + FMA,
//! then portable code), detected at run time, never assumed from the build machine, and
//! forcible (`--cpu-kernels`) so tests and benchmarks can compare the paths on one CPU. All
//! paths keep f32 activations by default and differ only in vector width and summation order;
//! `--cpu-activations int8` opts the many-token matmuls into 8-bit activations
//! (`int8/lanes.rs`).

use std::sync::atomic::{AtomicU8, Ordering};

/// The activations' precision is a setting (`--cpu-activations`), declared with it.
pub use crate::config::Activations;
use crate::config::CpuKernels;

/// One kernel path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    Avx512,
    Avx2,
    Portable,
}

impl KernelPath {
    /// Every path, fastest first.
    pub const ALL: [KernelPath; 3] = [KernelPath::Avx512, KernelPath::Avx2, KernelPath::Portable];

    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Avx512 => "avx512",
            KernelPath::Avx2 => "avx2",
            KernelPath::Portable => "portable",
        }
    }

    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            KernelPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest path this CPU runs.
    pub fn best() -> KernelPath {
        Self::ALL
            .into_iter()
            .find(|p| p.available())
            .unwrap_or(KernelPath::Portable)
    }

    /// The path `--cpu-kernels` chose: `auto` is the best; a path this CPU cannot run is
    /// refused.
    pub fn chosen(choice: CpuKernels) -> Result<KernelPath, String> {
        let path = match choice {
            CpuKernels::Auto => return Ok(Self::best()),
            CpuKernels::Avx512 => KernelPath::Avx512,
            CpuKernels::Avx2 => KernelPath::Avx2,
            CpuKernels::Portable => KernelPath::Portable,
        };
        if !path.available() {
            return Err(format!("this CPU cannot run the {} kernels", path.name()));
        }
        Ok(path)
    }

    /// `auto` (the best) or a path by name; a path this CPU cannot run is refused.
    pub fn choose(choice: &str) -> Result<KernelPath, String> {
        if choice == "auto" {
            return Ok(Self::best());
        }
        let path = Self::ALL
            .into_iter()
            .find(|p| p.name() == choice)
            .ok_or_else(|| format!("`{choice}` is not auto, avx512, avx2 or portable"))?;
        if !path.available() {
            return Err(format!("this CPU cannot run the {choice} kernels"));
        }
        Ok(path)
    }

    fn code(self) -> u8 {
        match self {
            KernelPath::Avx512 => 1,
            KernelPath::Avx2 => 2,
            KernelPath::Portable => 3,
        }
    }
}

/// 0: not chosen yet (the best is chosen on first use).
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The path the kernels use from now on (once, at start).
pub fn set_active(path: KernelPath) {
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    ACTIVE.store(path.code(), Ordering::Relaxed);
}

/// The path in use: the one set at start, or else the best this CPU runs.
pub fn active() -> KernelPath {
    match ACTIVE.load(Ordering::Relaxed) {
        1 => KernelPath::Avx512,
        2 => KernelPath::Avx2,
        3 => KernelPath::Portable,
        _ => {
            let best = KernelPath::best();
            ACTIVE.store(best.code(), Ordering::Relaxed);
            best
        }
    }
}

/// 0: f32 (the default), 1: int8.
static ACTIVATIONS: AtomicU8 = AtomicU8::new(0);

/// The activations' precision from now on (once, at start).
pub fn set_activations(mode: Activations) {
    ACTIVATIONS.store(u8::from(mode == Activations::Int8), Ordering::Relaxed);
}

thread_local! {
    /// A mode [`with_activations`] sets on this thread, over the process's.
    static SCOPED: std::cell::Cell<Option<Activations>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with `mode`'s activations on this thread (a runner's own mode), whatever the
/// process's setting.
pub fn with_activations<R>(mode: Activations, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Activations>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.set(self.0);
        }
    }
    let _restore = Restore(SCOPED.replace(Some(mode)));
    f()
}

/// The activations' precision in use on this thread: [`with_activations`]'s, else the
/// process's.
pub fn activations() -> Activations {
    if let Some(mode) = SCOPED.get() {
        return mode;
    }
    match ACTIVATIONS.load(Ordering::Relaxed) {
        1 => Activations::Int8,
        _ => Activations::F32,
    }
}

/// Whether this CPU has AVX-512 VNNI (with AVX-512BW and VL), which the int8 kernel's fast
/// path needs; without it int8 runs the portable integer kernel.
pub fn int8_vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the int8 kernel on `path` is the VNNI one: the AVX-512 path of a CPU with VNNI.
/// Anywhere else it is the portable integer kernel, the reference.
pub fn int8_vnni_on(path: KernelPath) -> bool {
    path == KernelPath::Avx512 && int8_vnni_available()
}

/// The int8 kernel `path` runs: `vnni` on the AVX-512 path of a CPU with VNNI, else
/// `portable`.
pub fn int8_kernel_name(path: KernelPath) -> &'static str {
    if int8_vnni_on(path) { "avx512-vnni" } else { "portable" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choosing_follows_what_the_cpu_can_run() {
        assert_eq!(KernelPath::choose("auto").unwrap(), KernelPath::best());
        assert_eq!(KernelPath::choose("portable").unwrap(), KernelPath::Portable);
        assert!(KernelPath::choose("sse9").unwrap_err().contains("not auto"));
        for path in KernelPath::ALL {
            assert_eq!(KernelPath::choose(path.name()).is_ok(), path.available(), "{path:?}");
        }
        assert!(KernelPath::best().available());
    }

    #[test]
    fn every_forced_kernel_path_is_refused_exactly_when_this_cpu_lacks_it() {
        assert_eq!(KernelPath::chosen(CpuKernels::Auto), Ok(KernelPath::best()));
        assert_eq!(KernelPath::chosen(CpuKernels::Portable), Ok(KernelPath::Portable));
        for (choice, path) in [
            (CpuKernels::Avx512, KernelPath::Avx512),
            (CpuKernels::Avx2, KernelPath::Avx2),
        ] {
            assert_eq!(KernelPath::chosen(choice).is_ok(), path.available(), "{choice:?}");
        }
    }
}
