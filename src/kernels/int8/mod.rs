//! The opt-in 8-bit activation mode (`--cpu-activations int8`) of the many-token matmul:
//! the operands' layout, the multiplication over token lanes, and its AVX-512 VNNI kernel.

pub mod lanes;
pub(super) mod layout;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
pub(super) mod vnni;
