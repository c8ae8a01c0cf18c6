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
    /// Eight at a time with F16C where this CPU has it (detected at run time by `half`),
    /// else the portable conversion.
    #[inline(always)]
    fn widen_into(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
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
