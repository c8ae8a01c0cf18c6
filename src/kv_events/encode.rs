//! vLLM's KV-event payload, byte for byte as msgspec writes it (`vllm/distributed/kv_events.py`
//! since vLLM PR #42892, 2026: `EventBatch` is `array_like=True`, the events are tagged maps,
//! all `omit_defaults=True`):
//!
//! - `EventBatch`: `[ts: float64, events: [...], data_parallel_rank: int]`;
//! - `BlockStored`: `{"type": "BlockStored", "block_hashes", "parent_block_hash" (nil for
//!   none), "token_ids", "block_size", "lora_id" (nil), "medium", "lora_name" (nil)}` (the
//!   defaulted `extra_keys`, `group_idx` and `kv_cache_spec_*` left out, as msgspec omits them
//!   when unset);
//! - `BlockRemoved`: `{"type": "BlockRemoved", "block_hashes", "medium"}`;
//! - `AllBlocksCleared`: `{"type": "AllBlocksCleared"}`.
//!
//! `medium` is `"GPU"` for kiln's own KV pool (on any device) and `"CPU"` for its host swap pool.
//! The events were positional arrays (`["BlockStored", ...]`) before that PR; current
//! consumers read maps only (vllm-router 0.1.17 refuses any other event: "KV event must be a
//! tagged map"), llm-d's adapter both.
//!
//! Hashes are unsigned integers (vLLM's default, `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`);
//! integers take msgpack's smallest form, as msgspec writes them.

use rmp::encode::{self, ValueWriteError};

use crate::kv_cache::block::hash::BlockHash;
use crate::kv_cache::events::KvCacheEvent;
#[cfg(test)]
use crate::kv_cache::events::Medium;

/// One `EventBatch` payload: the events of one engine step, stamped `ts` (seconds since the
/// Unix epoch), from data-parallel rank `dp_rank` (kiln is one rank: 0, as vLLM writes it).
pub fn encode_batch(ts: f64, events: &[KvCacheEvent], dp_rank: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + events.len() * 32);
    write_batch(&mut out, ts, events, dp_rank).expect("writing to a Vec cannot fail");
    out
}

fn write_batch(out: &mut Vec<u8>, ts: f64, events: &[KvCacheEvent], dp_rank: u32) -> Result<(), ValueWriteError> {
    encode::write_array_len(out, 3)?;
    encode::write_f64(out, ts)?;
    encode::write_array_len(out, len(events.len()))?;
    for event in events {
        write_event(out, event)?;
    }
    encode::write_uint(out, u64::from(dp_rank))?;
    Ok(())
}

fn write_event(out: &mut Vec<u8>, event: &KvCacheEvent) -> Result<(), ValueWriteError> {
    match event {
        KvCacheEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            medium,
            lora_id,
            lora_name,
        } => {
            encode::write_map_len(out, 8)?;
            write_tag(out, "BlockStored")?;
            encode::write_str(out, "block_hashes")?;
            write_hashes(out, block_hashes)?;
            encode::write_str(out, "parent_block_hash")?;
            match parent_block_hash {
                Some(hash) => drop(encode::write_uint(out, hash.external())?),
                None => write_nil(out)?,
            }
            encode::write_str(out, "token_ids")?;
            encode::write_array_len(out, len(token_ids.len()))?;
            for &token in token_ids {
                encode::write_uint(out, u64::from(token))?;
            }
            encode::write_str(out, "block_size")?;
            encode::write_uint(out, *block_size as u64)?;
            encode::write_str(out, "lora_id")?;
            match lora_id {
                Some(id) => drop(encode::write_uint(out, u64::from(*id))?),
                None => write_nil(out)?,
            }
            encode::write_str(out, "medium")?;
            encode::write_str(out, medium.as_str())?;
            encode::write_str(out, "lora_name")?;
            match lora_name {
                Some(name) => encode::write_str(out, name)?,
                None => write_nil(out)?,
            }
        }
        KvCacheEvent::BlockRemoved { block_hashes, medium } => {
            encode::write_map_len(out, 3)?;
            write_tag(out, "BlockRemoved")?;
            encode::write_str(out, "block_hashes")?;
            write_hashes(out, block_hashes)?;
            encode::write_str(out, "medium")?;
            encode::write_str(out, medium.as_str())?;
        }
        KvCacheEvent::AllBlocksCleared => {
            encode::write_map_len(out, 1)?;
            write_tag(out, "AllBlocksCleared")?;
        }
    }
    Ok(())
}

/// msgspec's `tag=True`: the class name under `"type"`, the map's first key.
fn write_tag(out: &mut Vec<u8>, name: &str) -> Result<(), ValueWriteError> {
    encode::write_str(out, "type")?;
    encode::write_str(out, name)
}

/// Each hash as its last 8 digest bytes, big-endian (vLLM's integer block hashes).
fn write_hashes(out: &mut Vec<u8>, hashes: &[BlockHash]) -> Result<(), ValueWriteError> {
    encode::write_array_len(out, len(hashes.len()))?;
    for hash in hashes {
        encode::write_uint(out, hash.external())?;
    }
    Ok(())
}

fn write_nil(out: &mut Vec<u8>) -> Result<(), ValueWriteError> {
    encode::write_nil(out).map_err(ValueWriteError::InvalidMarkerWrite)
}

/// msgpack arrays hold at most u32::MAX items; a step's events are far fewer.
fn len(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 items")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: u64) -> BlockHash {
        BlockHash::from_u64(v)
    }

    /// msgpack's fixstr: a length byte, then the bytes.
    fn s(text: &str) -> Vec<u8> {
        let mut out = vec![0xa0 | u8::try_from(text.len()).expect("short")];
        out.extend(text.as_bytes());
        out
    }

    /// The exact bytes for one event of each kind, written out by hand from the msgpack spec
    /// in the field order of vLLM's structs, the tag first.
    #[test]
    fn a_batch_has_vllm_field_order_and_msgpack_shapes() {
        let events = [
            KvCacheEvent::BlockStored {
                block_hashes: vec![h(1), h(u64::MAX)],
                parent_block_hash: None,
                token_ids: vec![7, 300],
                block_size: 1,
                medium: Medium::Gpu,
                lora_id: None,
                lora_name: None,
            },
            KvCacheEvent::BlockRemoved {
                block_hashes: vec![h(200)],
                medium: Medium::Cpu,
            },
            KvCacheEvent::AllBlocksCleared,
        ];
        let bytes = encode_batch(1.5, &events, 0);
        let mut expected = vec![0x93, 0xcb];
        expected.extend(1.5f64.to_be_bytes());
        expected.push(0x93); // three events
        expected.push(0x88); // BlockStored: a map of 8
        expected.extend(s("type"));
        expected.extend(s("BlockStored"));
        expected.extend(s("block_hashes"));
        expected.extend([0x92, 0x01, 0xcf]); // [1, u64::MAX as uint64]
        expected.extend(u64::MAX.to_be_bytes());
        expected.extend(s("parent_block_hash"));
        expected.push(0xc0); // no parent
        expected.extend(s("token_ids"));
        expected.extend([0x92, 0x07, 0xcd, 0x01, 0x2c]); // [7, 300 as uint16]
        expected.extend(s("block_size"));
        expected.push(0x01);
        expected.extend(s("lora_id"));
        expected.push(0xc0);
        expected.extend(s("medium"));
        expected.extend(s("GPU"));
        expected.extend(s("lora_name"));
        expected.push(0xc0);
        expected.push(0x83); // BlockRemoved: a map of 3
        expected.extend(s("type"));
        expected.extend(s("BlockRemoved"));
        expected.extend(s("block_hashes"));
        expected.extend([0x91, 0xcc, 200]); // [200 as uint8]
        expected.extend(s("medium"));
        expected.extend(s("CPU")); // the swap pool's medium
        expected.push(0x81); // AllBlocksCleared: the tag alone
        expected.extend(s("type"));
        expected.extend(s("AllBlocksCleared"));
        expected.push(0x00); // data_parallel_rank
        assert_eq!(bytes, expected);
    }

    /// The bytes after `key`'s name in the first event.
    fn after<'a>(bytes: &'a [u8], key: &str) -> &'a [u8] {
        let key = s(key);
        let at = bytes.windows(key.len()).position(|w| w == key).expect("key") + key.len();
        &bytes[at..]
    }

    #[test]
    fn a_parent_is_an_integer() {
        let stored = KvCacheEvent::BlockStored {
            block_hashes: vec![h(5)],
            parent_block_hash: Some(h(4)),
            token_ids: vec![1],
            block_size: 1,
            medium: Medium::Gpu,
            lora_id: None,
            lora_name: None,
        };
        let bytes = encode_batch(0.0, &[stored], 0);
        assert_eq!(after(&bytes, "block_hashes")[..2], [0x91, 0x05]);
        assert_eq!(after(&bytes, "parent_block_hash")[0], 0x04);
    }

    /// A block computed under an adapter names it as vLLM's `BlockStored` does: `lora_id` an
    /// integer, `lora_name` a string.
    #[test]
    fn an_adapters_blocks_carry_its_id_and_name() {
        let stored = KvCacheEvent::BlockStored {
            block_hashes: vec![h(5)],
            parent_block_hash: None,
            token_ids: vec![1],
            block_size: 1,
            medium: Medium::Gpu,
            lora_id: Some(3),
            lora_name: Some("sql".into()),
        };
        let bytes = encode_batch(0.0, &[stored], 0);
        assert_eq!(after(&bytes, "lora_id")[0], 0x03);
        assert_eq!(after(&bytes, "lora_name")[..4], s("sql")[..]);
    }
}
