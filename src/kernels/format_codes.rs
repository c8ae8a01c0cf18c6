//! [`BlockFormat`]s as const-generic codes, so that the SIMD kernel files (`avx2.rs`,
//! `avx512.rs`) compile one copy of a kernel per format: with the format matched per block,
//! LLVM kept the accumulators on the stack (docs/08-performance.md).

use super::packed::BlockFormat;

pub(super) const NIBBLES: u8 = 0;
pub(super) const BYTES: u8 = 1;
pub(super) const HALF_SCALED_BYTES: u8 = 2;
pub(super) const OFFSET_BYTES: u8 = 3;
pub(super) const FIVE_BIT: u8 = 4;

/// The [`BlockFormat`] a format code stands for.
pub(super) const fn format_of(code: u8) -> BlockFormat {
    match code {
        NIBBLES => BlockFormat::Nibbles,
        BYTES => BlockFormat::Bytes,
        HALF_SCALED_BYTES => BlockFormat::HalfScaledBytes,
        OFFSET_BYTES => BlockFormat::OffsetBytes,
        _ => BlockFormat::FiveBit,
    }
}

/// Calls the calling file's `tile::<TOKENS, FORMAT>` for matrix `$w`'s format and a tile of
/// `$n` tokens, one of the listed lengths.
macro_rules! tiles {
    ($w:ident, $r:ident, $x:ident, $t0:ident, $n:ident, $o:ident; $($len:literal)*) => {{
        use $crate::kernels::format_codes::{BYTES, FIVE_BIT, HALF_SCALED_BYTES, NIBBLES, OFFSET_BYTES};
        use $crate::kernels::packed::BlockFormat;
        match ($w.format, $n) {
            $(
                (BlockFormat::Nibbles, $len) => tile::<$len, NIBBLES>($w, $r, $x, $t0, $o),
                (BlockFormat::Bytes, $len) => tile::<$len, BYTES>($w, $r, $x, $t0, $o),
                (BlockFormat::FiveBit, $len) => tile::<$len, FIVE_BIT>($w, $r, $x, $t0, $o),
                (BlockFormat::HalfScaledBytes, $len) => tile::<$len, HALF_SCALED_BYTES>($w, $r, $x, $t0, $o),
                (BlockFormat::OffsetBytes, $len) => tile::<$len, OFFSET_BYTES>($w, $r, $x, $t0, $o),
            )*
            _ => unreachable!("token tiles hold 1 to 8 tokens"),
        }
    }};
}
pub(super) use tiles;
