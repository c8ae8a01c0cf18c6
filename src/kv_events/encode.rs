//! vLLM's KV-event payload, byte for byte as msgspec writes it (vLLM 0.20.0,
//! `vllm/distributed/kv_events.py`, whose structs are `array_like=True, omit_defaults=True`):
//!
//! - `EventBatch`: `[ts: float64, events: [...], data_parallel_rank: int]`;
//! - `BlockStored`: `["BlockStored", block_hashes, parent_block_hash | nil, token_ids,
//!   block_size, lora_id | nil, medium, lora_name | nil]` (the trailing defaults
//!   `extra_keys` and `group_idx` left out, as msgspec omits them when unset);
//! - `BlockRemoved`: `["BlockRemoved", block_hashes, medium]`;
//!
//! `medium` is `"GPU"` for kiln's own KV pool (on any device) and `"CPU"` for its host swap pool.
//! - `AllBlocksCleared`: `["AllBlocksCleared"]`.
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
            encode::write_array_len(out, 8)?;
            encode::write_str(out, "BlockStored")?;
            write_hashes(out, block_hashes)?;
            match parent_block_hash {
                Some(hash) => drop(encode::write_uint(out, hash.external())?),
                None => write_nil(out)?,
            }
            encode::write_array_len(out, len(token_ids.len()))?;
            for &token in token_ids {
                encode::write_uint(out, u64::from(token))?;
            }
            encode::write_uint(out, *block_size as u64)?;
            match lora_id {
                Some(id) => drop(encode::write_uint(out, u64::from(*id))?),
                None => write_nil(out)?,
            }
            encode::write_str(out, medium.as_str())?;
            match lora_name {
                Some(name) => encode::write_str(out, name)?,
                None => write_nil(out)?,
            }
        }
        KvCacheEvent::BlockRemoved { block_hashes, medium } => {
            encode::write_array_len(out, 3)?;
            encode::write_str(out, "BlockRemoved")?;
            write_hashes(out, block_hashes)?;
            encode::write_str(out, medium.as_str())?;
        }
        KvCacheEvent::AllBlocksCleared => {
            encode::write_array_len(out, 1)?;
            encode::write_str(out, "AllBlocksCleared")?;
        }
    }
    Ok(())
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

    /// The exact bytes for one event of each kind, written out by hand from the msgpack spec
    /// in the field order of vLLM's structs.
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
        expected.push(0x98); // BlockStored: 8 fields
        expected.push(0xa0 | 11);
        expected.extend(b"BlockStored");
        expected.extend([0x92, 0x01, 0xcf]); // [1, u64::MAX as uint64]
        expected.extend(u64::MAX.to_be_bytes());
        expected.push(0xc0); // no parent
        expected.extend([0x92, 0x07, 0xcd, 0x01, 0x2c]); // [7, 300 as uint16]
        expected.push(0x01); // block_size
        expected.push(0xc0); // lora_id
        expected.extend([0xa3, b'G', b'P', b'U']); // medium
        expected.push(0xc0); // lora_name
        expected.push(0x93); // BlockRemoved: 3 fields
        expected.push(0xa0 | 12);
        expected.extend(b"BlockRemoved");
        expected.extend([0x91, 0xcc, 200]); // [200 as uint8]
        expected.extend([0xa3, b'C', b'P', b'U']); // the swap pool's medium
        expected.push(0x91); // AllBlocksCleared: the tag alone
        expected.push(0xa0 | 16);
        expected.extend(b"AllBlocksCleared");
        expected.push(0x00); // data_parallel_rank
        assert_eq!(bytes, expected);
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
        // ... "BlockStored", [5], 4, ...
        let tag_end = bytes.windows(11).position(|w| w == b"BlockStored").expect("tag") + 11;
        assert_eq!(&bytes[tag_end..tag_end + 3], &[0x91, 0x05, 0x04]);
    }

    /// A block computed under an adapter names it as vLLM's `BlockStored` does: `lora_id` an
    /// integer before `medium`, `lora_name` a string after it.
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
        let tag_end = bytes.windows(11).position(|w| w == b"BlockStored").expect("tag") + 11;
        // [5], nil parent, [1], block_size 1, lora_id 3, "GPU", "sql"
        let mut expected = vec![0x91, 0x05, 0xc0, 0x91, 0x01, 0x01, 0x03, 0xa3];
        expected.extend(b"GPU");
        expected.push(0xa3);
        expected.extend(b"sql");
        assert_eq!(&bytes[tag_end..tag_end + expected.len()], &expected[..]);
    }
}
