//! The identity of a full KV block's contents: the prefix cache keys blocks by it and
//! KV-cache events publish it, so a router indexing those events (or hashing token ids
//! itself, as vllm-router's `kv_aware` and llm-d's precise prefix scorer do) must compute the
//! same value. Hashes chain parent → child, so equal hashes mean equal token prefixes.
//!
//! Three schemes (`--prefix-caching-hash-algo`):
//! - `sha256_cbor` (vLLM's, the default with KV events): SHA-256 of the canonical CBOR of
//!   `(parent's 32-byte digest, (token ids...), None)`; the first block's parent is
//!   `NONE_HASH` = `sha256_cbor(PYTHONHASHSEED as a text string)`, or 32 random bytes when
//!   `PYTHONHASHSEED` is unset (vLLM's rule: hashes then differ from process to process).
//! - `sha256_cbor_64bit` (vLLM 0.10's): the same over `(parent as a 64-bit integer, (token
//!   ids...), None)`, each hash cut to the last 8 digest bytes, big-endian; `NONE_HASH` =
//!   `sha256_cbor_64bit(PYTHONHASHSEED)` (a random 64-bit value when unset).
//! - `kiln` (kiln's own, the default without KV events): the last 8 bytes, big-endian, of
//!   SHA-256(parent's hash as 8 big-endian bytes (0 for the first block) ‖ each token id as 4
//!   little-endian bytes); the same in every process.
//!
//! Events publish a hash as its last 8 digest bytes, big-endian ([`BlockHash::external`]),
//! as vLLM does with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`. kiln's requests carry no LoRA,
//! multimodal input or cache salt, so vLLM's extra keys are always `None`.

use sha2::{Digest, Sha256};

pub use crate::config::PrefixCachingHashAlgo;

/// A full block's hash: its contents and everything before them (a whole SHA-256 digest;
/// the 64-bit schemes keep their value in the last 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHash([u8; 32]);

impl BlockHash {
    /// What KV events publish and routers index: the last 8 bytes, big-endian.
    pub fn external(self) -> u64 {
        let mut last = [0u8; 8];
        last.copy_from_slice(&self.0[24..]);
        u64::from_be_bytes(last)
    }

    /// The hash whose external form is `value` (the 64-bit schemes; tests).
    pub fn from_u64(value: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[24..].copy_from_slice(&value.to_be_bytes());
        Self(bytes)
    }

    /// The whole digest (what `sha256_cbor` chains on).
    pub fn digest(self) -> [u8; 32] {
        self.0
    }
}

/// Hashes blocks with one scheme and seed; the same for every block of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHasher {
    algo: PrefixCachingHashAlgo,
    /// The first block's parent (vLLM's `NONE_HASH`); unused by `kiln`.
    none_hash: BlockHash,
}

impl Default for BlockHasher {
    /// kiln's own scheme, which needs no seed.
    fn default() -> Self {
        Self::new(PrefixCachingHashAlgo::Kiln, None)
    }
}

impl BlockHasher {
    /// `seed` is `PYTHONHASHSEED` as vLLM reads it; `None` draws a random `NONE_HASH` (vLLM's
    /// rule), so no other process computes the same hashes.
    pub fn new(algo: PrefixCachingHashAlgo, seed: Option<&str>) -> Self {
        let none_hash = match (algo, seed) {
            (PrefixCachingHashAlgo::Kiln | PrefixCachingHashAlgo::Auto, _) => BlockHash([0; 32]),
            (PrefixCachingHashAlgo::Sha256Cbor, Some(seed)) => BlockHash(sha256_cbor_text(seed)),
            (PrefixCachingHashAlgo::Sha256Cbor64bit, Some(seed)) => {
                BlockHash::from_u64(BlockHash(sha256_cbor_text(seed)).external())
            }
            (PrefixCachingHashAlgo::Sha256Cbor, None) => BlockHash(rand::random()),
            (PrefixCachingHashAlgo::Sha256Cbor64bit, None) => BlockHash::from_u64(rand::random()),
        };
        Self { algo, none_hash }
    }

    pub fn algo(&self) -> PrefixCachingHashAlgo {
        self.algo
    }

    /// The hash of a block holding `tokens` whose preceding block hashed to `parent`.
    pub fn hash(&self, parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
        match self.algo {
            // `auto` is resolved at start (`PrefixCachingHashAlgo::resolved`); kiln's own otherwise.
            PrefixCachingHashAlgo::Kiln | PrefixCachingHashAlgo::Auto => kiln_hash(parent, tokens),
            PrefixCachingHashAlgo::Sha256Cbor => {
                let parent = parent.unwrap_or(self.none_hash);
                let mut cbor = Vec::with_capacity(48 + tokens.len() * 5);
                cbor.push(0x83);
                cbor_head(&mut cbor, 0x40, 32);
                cbor.extend_from_slice(&parent.0);
                cbor_tokens_and_none(&mut cbor, tokens);
                BlockHash(Sha256::digest(&cbor).into())
            }
            PrefixCachingHashAlgo::Sha256Cbor64bit => {
                let parent = parent.unwrap_or(self.none_hash);
                let mut cbor = Vec::with_capacity(16 + tokens.len() * 5);
                cbor.push(0x83);
                cbor_head(&mut cbor, 0x00, parent.external());
                cbor_tokens_and_none(&mut cbor, tokens);
                BlockHash::from_u64(BlockHash(Sha256::digest(&cbor).into()).external())
            }
        }
    }

    /// What a request's first block chains from: nothing for the base model; for a LoRA
    /// adapter, a root hashed from its id, so that a prefix computed under one adapter is never
    /// reused under another or the base (vLLM folds the adapter into its block hashes' extra
    /// keys instead). The root is the hash of a two-token block `[u32::MAX, id]`: no real block
    /// holds the token `u32::MAX`.
    pub fn first_parent(&self, lora: Option<u32>) -> Option<BlockHash> {
        lora.map(|id| self.hash(None, &[u32::MAX, id]))
    }

    /// The chained hashes of every full block of `tokens`, in order, under `lora`'s root.
    pub fn hash_all(&self, tokens: &[u32], block_size: usize, lora: Option<u32>) -> Vec<BlockHash> {
        let root = self.first_parent(lora);
        let mut hashes: Vec<BlockHash> = Vec::with_capacity(tokens.len() / block_size);
        for chunk in tokens.chunks_exact(block_size) {
            hashes.push(self.hash(hashes.last().copied().or(root), chunk));
        }
        hashes
    }
}

fn kiln_hash(parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
    let mut sha = Sha256::new();
    sha.update(parent.map_or(0, BlockHash::external).to_be_bytes());
    for token in tokens {
        sha.update(token.to_le_bytes());
    }
    BlockHash::from_u64(BlockHash(sha.finalize().into()).external())
}

/// `sha256(cbor2.dumps(text))`: how vLLM turns `PYTHONHASHSEED` into `NONE_HASH`.
fn sha256_cbor_text(text: &str) -> [u8; 32] {
    let mut cbor = Vec::with_capacity(text.len() + 9);
    cbor_head(&mut cbor, 0x60, text.len() as u64);
    cbor.extend_from_slice(text.as_bytes());
    Sha256::digest(&cbor).into()
}

/// The token ids as a CBOR array of unsigned integers, then CBOR `null` (the extra keys).
fn cbor_tokens_and_none(cbor: &mut Vec<u8>, tokens: &[u32]) {
    cbor_head(cbor, 0x80, tokens.len() as u64);
    for &token in tokens {
        cbor_head(cbor, 0x00, u64::from(token));
    }
    cbor.push(0xf6);
}

/// A CBOR item head of `major` type (already shifted) with its argument in the shortest
/// form, as canonical CBOR (RFC 8949 §4.2.1) and `cbor2` write it.
fn cbor_head(out: &mut Vec<u8>, major: u8, value: u64) {
    match value {
        0..=23 => out.push(major | value as u8),
        24..=0xff => out.extend_from_slice(&[major | 24, value as u8]),
        0x100..=0xffff => {
            out.push(major | 25);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(major | 26);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        }
        _ => {
            out.push(major | 27);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adapter_roots_its_own_chain() {
        let tokens = [1, 2, 3, 4];
        for hasher in [kiln(), BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, Some("0"))] {
            let base = hasher.hash(hasher.first_parent(None), &tokens);
            let one = hasher.hash(hasher.first_parent(Some(1)), &tokens);
            let two = hasher.hash(hasher.first_parent(Some(2)), &tokens);
            assert_eq!(base, hasher.hash(None, &tokens));
            assert!(base != one && one != two && base != two);
            assert_eq!(
                hasher.hash_all(&tokens, 2, Some(1))[0],
                hasher.hash(hasher.first_parent(Some(1)), &[1, 2])
            );
        }
    }

    fn kiln() -> BlockHasher {
        BlockHasher::default()
    }

    /// Fixed values: a change here changes every hash kiln publishes, which routers that
    /// index kiln's events would see as a cache wiped at the upgrade.
    #[test]
    fn a_fixed_token_sequence_hashes_to_a_fixed_value() {
        let first = kiln().hash(None, &[1, 2, 3, 4]);
        assert_eq!(first.external(), 0xf656_0db0_7ef5_4f44);
        assert_eq!(
            kiln().hash(Some(first), &[5, 6, 7, 8]).external(),
            0x38f2_2312_8ac9_5984
        );
    }

    #[test]
    fn the_parent_and_every_token_count() {
        for algo in [
            PrefixCachingHashAlgo::Kiln,
            PrefixCachingHashAlgo::Sha256Cbor,
            PrefixCachingHashAlgo::Sha256Cbor64bit,
        ] {
            let h = BlockHasher::new(algo, Some("0"));
            let root = h.hash(None, &[1, 2, 3, 4]);
            assert_ne!(
                h.hash(Some(root), &[5, 6, 7, 8]),
                h.hash(None, &[5, 6, 7, 8]),
                "{algo:?}"
            );
            assert_ne!(root, h.hash(None, &[1, 2, 3, 5]), "{algo:?}");
            assert_ne!(root, h.hash(None, &[4, 3, 2, 1]), "{algo:?}");
        }
    }

    /// kiln's definition in the module doc, spelled out independently.
    #[test]
    fn kiln_matches_the_documented_definition() {
        let mut input = 0u64.to_be_bytes().to_vec();
        for t in [1u32, 2, 3, 4] {
            input.extend(t.to_le_bytes());
        }
        let digest = Sha256::digest(&input);
        let expected = u64::from_be_bytes(digest[24..].try_into().expect("8 bytes"));
        assert_eq!(kiln().hash(None, &[1, 2, 3, 4]).external(), expected);
    }

    /// `sha256_cbor` with `PYTHONHASHSEED=0` over the bytes cbor2 writes, spelled out:
    /// `NONE_HASH` = sha256(0x61 '0'); block = sha256(0x83 0x58 0x20 NONE_HASH 0x84 1 2 3 4 0xf6).
    /// (tests/python/vllm_block_hashes.py checks against vLLM's own code.)
    #[test]
    fn sha256_cbor_matches_the_cbor_bytes_spelled_out() {
        let none_hash: [u8; 32] = Sha256::digest([0x61, b'0']).into();
        let mut block = vec![0x83, 0x58, 0x20];
        block.extend_from_slice(&none_hash);
        block.extend_from_slice(&[0x84, 1, 2, 3, 4, 0xf6]);
        let expected: [u8; 32] = Sha256::digest(&block).into();
        let h = BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, Some("0"));
        assert_eq!(h.hash(None, &[1, 2, 3, 4]).digest(), expected);
    }

    #[test]
    fn cbor_heads_take_the_shortest_form() {
        let head = |v: u64| {
            let mut out = Vec::new();
            cbor_head(&mut out, 0, v);
            out
        };
        assert_eq!(head(23), [23]);
        assert_eq!(head(24), [24, 24]);
        assert_eq!(head(255), [24, 255]);
        assert_eq!(head(256), [25, 1, 0]);
        assert_eq!(head(65_536), [26, 0, 1, 0, 0]);
        assert_eq!(head(1 << 32), [27, 0, 0, 0, 1, 0, 0, 0, 0]);
    }

    /// Without `PYTHONHASHSEED`, vLLM's rule draws a fresh `NONE_HASH` per process.
    #[test]
    fn without_a_seed_two_hashers_disagree() {
        let a = BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, None);
        let b = BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, None);
        assert_ne!(a.hash(None, &[1, 2]), b.hash(None, &[1, 2]));
        let same = BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, Some("42"));
        assert_eq!(
            same.hash(None, &[1, 2]),
            BlockHasher::new(PrefixCachingHashAlgo::Sha256Cbor, Some("42")).hash(None, &[1, 2])
        );
    }
}
