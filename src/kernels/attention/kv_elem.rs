//! The element types the KV cache stores (f32, f16, bf16, FP8 E4M3) and their widening to
//! f32, which the attention kernels do row by row inside their loops: the cache stays 16- or
//! 8-bit in memory and the arithmetic stays f32.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::kernels::fp8::E4m3;

/// A KV-cache element the kernels read.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// `dst ← src` widened to f32 (same lengths).
    fn widen_into(src: &[Self], dst: &mut [f32]);

    /// `src` as f32: `src` itself where it already is, else widened into `buf`.
    #[inline(always)]
    fn widened<'a>(src: &'a [Self], buf: &'a mut [f32]) -> &'a [f32] {
        let dst = &mut buf[..src.len()];
        Self::widen_into(src, dst);
        dst
    }
}

impl KvElem for f32 {
    #[inline(always)]
    fn widen_into(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }

    #[inline(always)]
    fn widened<'a>(src: &'a [f32], _buf: &'a mut [f32]) -> &'a [f32] {
        src
    }
}

impl KvElem for f16 {
    /// One F16C loop over the row where this CPU has it, else the portable conversion.
    /// (`half`'s slice conversion calls a function through a pointer for every eight values,
    /// which at 4k context made float16 the slowest cache dtype.)
    #[inline(always)]
    fn widen_into(src: &[f16], dst: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: this CPU has F16C (checked above).
            unsafe { widen_f16c(src, dst) };
            return;
        }
        src.convert_to_f32_slice(dst);
    }
}

/// `dst ← src` widened, eight values an instruction.
///
/// # Safety
/// The CPU must support F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "f16c,avx")]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm256_cvtph_ps, _mm256_storeu_ps};
    let n = src.len().min(dst.len());
    let whole = n / 8 * 8;
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 <= n, within both slices; unaligned loads and stores.
        unsafe {
            let halves = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(halves));
        }
    }
    for (d, s) in dst[whole..n].iter_mut().zip(&src[whole..n]) {
        *d = s.to_f32();
    }
}

impl KvElem for bf16 {
    /// bf16 is the top half of an f32: a shift, which the caller's instruction set vectorises.
    #[inline(always)]
    fn widen_into(src: &[bf16], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits(u32::from(s.to_bits()) << 16);
        }
    }
}

impl KvElem for E4m3 {
    /// Bit moves and selects per code (scale 1.0), which the caller's instruction set
    /// vectorises.
    #[inline(always)]
    fn widen_into(src: &[E4m3], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }
}

/// The longest head a kernel widens on its stack.
pub const MAX_HEAD_DIM: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_gives_the_stored_values_back() {
        let values: Vec<f32> = (0..37).map(|i| (i as f32 - 18.0) * 0.37).collect();
        let halves: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
        let brains: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
        let mut buf = [0.0f32; 64];
        let wide = f16::widened(&halves, &mut buf);
        for (w, h) in wide.iter().zip(&halves) {
            assert_eq!(*w, h.to_f32());
        }
        let wide = bf16::widened(&brains, &mut buf);
        for (w, b) in wide.iter().zip(&brains) {
            assert_eq!(*w, b.to_f32());
        }
        let codes: Vec<E4m3> = values.iter().map(|&v| crate::kernels::fp8::encode(v)).collect();
        let wide = E4m3::widened(&codes, &mut buf);
        for (w, c) in wide.iter().zip(&codes) {
            assert_eq!(*w, c.to_f32());
        }
        assert!(std::ptr::eq(f32::widened(&values, &mut buf), values.as_slice()));
    }
}
