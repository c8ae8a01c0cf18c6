//! The identity of a full KV block's contents, stable across builds, platforms and
//! processes: KV-cache events publish it, so a router that saw a block stored by one kiln
//! build must recognise it from the next one (`std`'s `DefaultHasher` promises neither).
//!
//! `hash(parent, tokens)` = the last 8 bytes, big-endian, of
//! SHA-256(parent's hash as 8 big-endian bytes (0 for the first block) ‖ each token id as 4
//! little-endian bytes). Chained parent → child like vLLM's, so equal hashes mean equal token
//! prefixes (up to 64-bit collisions, as in vLLM); the last 8 bytes, big-endian, are what vLLM
//! publishes for its SHA-256 block hashes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`).

use sha2::{Digest, Sha256};

/// A full block's hash: its contents and everything before them.
pub type BlockHash = u64;

/// The hash of a block holding `tokens` whose preceding block hashed to `parent`.
pub fn hash_block(parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
    let mut sha = Sha256::new();
    sha.update(parent.unwrap_or(0).to_be_bytes());
    for token in tokens {
        sha.update(token.to_le_bytes());
    }
    let digest = sha.finalize();
    let mut last = [0u8; 8];
    last.copy_from_slice(&digest[24..]);
    u64::from_be_bytes(last)
}

/// What a request's first block chains from: nothing for the base model; for a LoRA adapter,
/// a root hashed from its id, so that a prefix computed under one adapter is never reused
/// under another or the base (vLLM folds the adapter into its block hashes' extra keys).
/// The root is the hash of a two-token block `[u32::MAX, id]`: no real block holds the
/// token `u32::MAX`.
pub fn first_parent(lora: Option<u32>) -> Option<BlockHash> {
    lora.map(|id| hash_block(None, &[u32::MAX, id]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_roots_its_own_chain() {
        let tokens = [1, 2, 3, 4];
        let base = hash_block(first_parent(None), &tokens);
        let one = hash_block(first_parent(Some(1)), &tokens);
        let two = hash_block(first_parent(Some(2)), &tokens);
        assert_eq!(base, hash_block(None, &tokens));
        assert!(base != one && one != two && base != two);
    }

    /// Fixed values: a change here changes every hash kiln publishes, which routers that
    /// index kiln's events would see as a cache wiped at the upgrade.
    #[test]
    fn a_fixed_token_sequence_hashes_to_a_fixed_value() {
        let first = hash_block(None, &[1, 2, 3, 4]);
        assert_eq!(first, 0xf656_0db0_7ef5_4f44);
        assert_eq!(hash_block(Some(first), &[5, 6, 7, 8]), 0x38f2_2312_8ac9_5984);
    }

    #[test]
    fn the_parent_and_every_token_count() {
        let root = hash_block(None, &[1, 2, 3, 4]);
        assert_ne!(hash_block(Some(root), &[5, 6, 7, 8]), hash_block(None, &[5, 6, 7, 8]));
        assert_ne!(root, hash_block(None, &[1, 2, 3, 5]));
        assert_ne!(root, hash_block(None, &[4, 3, 2, 1]));
    }

    /// The definition in the module doc, spelled out independently.
    #[test]
    fn matches_the_documented_definition() {
        let mut input = 0u64.to_be_bytes().to_vec();
        for t in [1u32, 2, 3, 4] {
            input.extend(t.to_le_bytes());
        }
        let digest = Sha256::digest(&input);
        let expected = u64::from_be_bytes(digest[24..].try_into().expect("8 bytes"));
        assert_eq!(hash_block(None, &[1, 2, 3, 4]), expected);
    }
}
