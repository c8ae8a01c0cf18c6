//! Hand-written CPU kernels behind the executor, for the work where burn's own fall short:
//! matrix products against weights kept in ggml's quantised blocks.

pub mod activation;
mod aligned;
pub mod attention;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod dispatch;
pub mod exp;
#[cfg(target_arch = "x86_64")]
mod format_codes;
pub mod fp8;
mod ggml_rows;
mod ggml_type;
pub mod int8;
pub mod matmul;
pub mod packed;
mod repack;
pub mod scratch;
mod strided_gemm;
#[cfg(test)]
mod test_blocks;
mod tiling;
mod token_lanes;
mod widen;

pub use dispatch::KernelPath;
pub use ggml_type::GgmlType;
pub use matmul::matmul_packed;
pub use packed::{BlockFormat, PackedMatrix};
pub use repack::{IQ4_VALUES, k4_scale_min};
