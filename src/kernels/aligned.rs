//! Activations on a cache-line boundary for the row kernels. Their tiles load each token's
//! activations 64 bytes at a time, once per weight block; from a buffer that starts off a
//! 64-byte boundary, as most `Vec<f32>`s do (malloc promises 16), every one of those loads
//! spans two cache lines. Copying such a buffer to a boundary made an 8-stream decode step
//! a quarter faster on a Zen 5 (bench_engine, 8 alternating runs), and which buffers
//! happened to be aligned had moved from build to build with the allocation pattern.

/// Sixteen f32 on a 64-byte boundary: one cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct Line([f32; 16]);

/// `x` itself when it starts on a 64-byte boundary, otherwise a copy that does.
pub(super) enum Aligned<'a> {
    Borrowed(&'a [f32]),
    Copied { lines: Vec<Line>, len: usize },
}

impl Aligned<'_> {
    /// The values, starting on a 64-byte boundary.
    pub fn as_slice(&self) -> &[f32] {
        match self {
            Aligned::Borrowed(x) => x,
            // SAFETY: `Line` is sixteen f32 with no padding (`repr(C)`, size 64), so the
            // lines are `16 * lines.len()` contiguous, initialised f32, of which the first
            // `len` are the copy.
            Aligned::Copied { lines, len } => unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<f32>(), *len) },
        }
    }
}

/// `x` on a 64-byte boundary, copied only when it is not already there.
pub(super) fn aligned(x: &[f32]) -> Aligned<'_> {
    if (x.as_ptr() as usize).is_multiple_of(std::mem::align_of::<Line>()) {
        return Aligned::Borrowed(x);
    }
    let lines = x
        .chunks(16)
        .map(|chunk| {
            let mut line = [0.0; 16];
            line[..chunk.len()].copy_from_slice(chunk);
            Line(line)
        })
        .collect();
    Aligned::Copied { lines, len: x.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offset_comes_back_aligned_with_the_same_values() {
        let backing: Vec<f32> = (0..200).map(|i| i as f32 * 0.5 - 7.0).collect();
        for start in 0..16 {
            for len in [0, 1, 15, 16, 17, 100] {
                let x = &backing[start..start + len];
                let a = aligned(x);
                let got = a.as_slice();
                assert_eq!(got, x, "start {start}, len {len}");
                assert!((got.as_ptr() as usize).is_multiple_of(64), "start {start}, len {len}");
            }
        }
    }

    #[test]
    fn an_aligned_slice_is_borrowed_not_copied() {
        let lines = vec![Line([1.0; 16]); 4];
        let x = Aligned::Copied { lines, len: 64 };
        let inner = x.as_slice();
        assert!(matches!(aligned(inner), Aligned::Borrowed(b) if std::ptr::eq(b, inner)));
    }
}
