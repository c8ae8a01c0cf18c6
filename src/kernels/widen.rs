//! One row of a packed matrix widened to f32 on a chosen kernel path: what the many-token
//! kernels (`matmul.rs`' gemm panels, `token_lanes.rs`) multiply.

use super::dispatch::KernelPath;
use super::packed::{BLOCK, PackedMatrix};

/// Row `r` of `w` widened to f32 into `out[..w.cols]` on `path`, which this CPU must run.
pub(super) fn widen_row_on(path: KernelPath, w: &PackedMatrix, r: usize, out: &mut [f32]) {
    assert!(path.available(), "this CPU cannot run the {} kernels", path.name());
    match path {
        // SAFETY: the CPU supports the features each function is compiled for (asserted).
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => unsafe { super::avx512::widen_row(w, r, out) },
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => unsafe { super::avx2::widen_row(w, r, out) },
        _ => {
            let bpr = w.blocks_per_row();
            for (b, dst) in out[..w.cols].chunks_exact_mut(BLOCK).enumerate() {
                dst.copy_from_slice(&w.block_values(r * bpr + b));
            }
        }
    }
}
