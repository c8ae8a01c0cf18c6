//! Parsing a GGUF header: every extent is checked against the file length before it is
//! read or allocated, so a truncated or corrupt file yields an error, never a panic or a
//! huge allocation.

use super::dequant::byte_size;
use super::types::{GgufValue, GgufValueType};
use super::{DEFAULT_ALIGNMENT, GgufError};
use crate::kernels::GgmlType;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Where one tensor lives and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Row-major, outermost dimension first (the reverse of ggml's `ne`).
    pub shape: Vec<usize>,
    pub ty: GgmlType,
    /// Offset from the start of the data section, as stored in the file.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub size_bytes: u64,
}

impl GgufTensorInfo {
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// ggml's `GGML_MAX_DIMS`: llama.cpp rejects tensors with more dimensions.
const MAX_DIMS: u32 = 4;
/// Smallest possible tensor info: empty name (8) + n_dims (4) + type (4) + offset (8).
const MIN_TENSOR_INFO: u64 = 24;
/// Smallest possible key/value: empty key (8) + type (4) + a one-byte value.
const MIN_KV: u64 = 13;
/// Cap on array elements across all metadata. A parsed value takes ~32 bytes in memory but
/// as little as one byte on disk, so bounding counts by file size alone still allows a 32x
/// blow-up. Real files hold about 1.5M (a 262k vocabulary with scores, types and merges).
const MAX_METADATA_VALUES: u64 = 16 << 20;

pub(super) struct Header {
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: u64,
    pub data_start: u64,
}

pub(super) fn parse_header(path: &Path, buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor {
        path,
        buf,
        pos: 0,
        values_left: MAX_METADATA_VALUES,
        warned_utf8: false,
    };
    let magic: [u8; 4] = c.take(4, "magic")?.try_into().unwrap_or_default();
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic,
        });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        let swapped = version.swap_bytes();
        let hint = if swapped == 2 || swapped == 3 {
            " (this looks like a big-endian GGUF)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            hint,
        });
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    c.check_count(n_kv, MIN_KV, "metadata count")?;

    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        let what = format!("metadata value '{key}'");
        let type_id = c.u32(&what)?;
        let value = c.value(type_id, &what, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(c.malformed("metadata", format!("duplicate key '{key}'")));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => {
                return Err(c.malformed("general.alignment", format!("{v:?} is not a power of two")));
            }
        },
    };

    c.check_count(n_tensors, MIN_TENSOR_INFO, "tensor count")?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut seen = HashMap::new();
    for i in 0..n_tensors {
        let info = c.tensor_info(i, alignment)?;
        if seen.insert(info.name.clone(), i).is_some() {
            return Err(c.malformed("tensor infos", format!("duplicate tensor '{}'", info.name)));
        }
        tensors.push(info);
    }

    let file_len = buf.len() as u64;
    let data_start = c.pos.next_multiple_of(alignment);
    for t in &tensors {
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.size_bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(GgufError::Truncated {
                path: path.to_path_buf(),
                what: format!("data of tensor '{}'", t.name),
                offset: data_start.saturating_add(t.offset),
                needed: t.size_bytes,
                file_len,
            });
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}

/// A bounds-checked little-endian reader over the mapped file.
struct Cursor<'a> {
    path: &'a Path,
    buf: &'a [u8],
    pos: u64,
    /// Array elements still allowed (see [`MAX_METADATA_VALUES`]).
    values_left: u64,
    warned_utf8: bool,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        self.buf.len() as u64 - self.pos
    }

    fn truncated(&self, what: &str, needed: u64) -> GgufError {
        GgufError::Truncated {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            offset: self.pos,
            needed,
            file_len: self.buf.len() as u64,
        }
    }

    fn malformed(&self, what: &str, detail: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            detail,
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        let start = self.pos as usize;
        self.pos += n;
        Ok(&self.buf[start..start + n as usize])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Rejects a count whose smallest possible encoding would not fit in the rest of the
    /// file, so a corrupt count can never drive a huge allocation or a long loop.
    fn check_count(&self, count: u64, min_each: u64, what: &str) -> Result<(), GgufError> {
        if count.saturating_mul(min_each) > self.remaining() {
            return Err(self.truncated(what, count.saturating_mul(min_each)));
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(s) => s.to_owned(),
            Err(_) => {
                // llama.cpp keeps raw bytes; kiln needs `String`s. Warn once per file, since a
                // vocabulary can hold thousands of such tokens.
                if !self.warned_utf8 {
                    self.warned_utf8 = true;
                    tracing::warn!(path = %self.path.display(), what, "invalid UTF-8 in GGUF string(s); replacing with U+FFFD");
                }
                String::from_utf8_lossy(bytes).into_owned()
            }
        })
    }

    fn value(&mut self, type_id: u32, what: &str, depth: u32) -> Result<GgufValue, GgufError> {
        let ty = GgufValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            type_id,
        })?;
        Ok(match ty {
            GgufValueType::U8 => GgufValue::U8(self.array::<1>(what)?[0]),
            GgufValueType::I8 => GgufValue::I8(i8::from_le_bytes(self.array(what)?)),
            GgufValueType::U16 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            GgufValueType::I16 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            GgufValueType::U32 => GgufValue::U32(self.u32(what)?),
            GgufValueType::I32 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            GgufValueType::F32 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            GgufValueType::U64 => GgufValue::U64(self.u64(what)?),
            GgufValueType::I64 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            GgufValueType::F64 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            GgufValueType::Bool => match self.array::<1>(what)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(self.malformed(what, format!("bool byte is {b}"))),
            },
            GgufValueType::String => GgufValue::String(self.string(what)?),
            GgufValueType::Array => {
                // gguf-py and llama.cpp never nest deeper than one level; a small cap stops a
                // crafted file from recursing the stack away.
                if depth >= 2 {
                    return Err(self.malformed(what, "arrays nested too deeply".into()));
                }
                let elem_id = self.u32(what)?;
                let elem = GgufValueType::from_id(elem_id).ok_or_else(|| GgufError::UnknownValueType {
                    path: self.path.to_path_buf(),
                    what: format!("element type of {what}"),
                    type_id: elem_id,
                })?;
                let len = self.u64(what)?;
                self.check_count(len, elem.min_encoded_size(), what)?;
                if len > self.values_left {
                    return Err(self.malformed(
                        what,
                        format!("{len} array elements exceed the metadata limit of {MAX_METADATA_VALUES}"),
                    ));
                }
                self.values_left -= len;
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(elem_id, what, depth + 1)?);
                }
                GgufValue::Array(items)
            }
        })
    }

    fn tensor_info(&mut self, index: u64, alignment: u64) -> Result<GgufTensorInfo, GgufError> {
        let name = self.string(&format!("name of tensor #{index}"))?;
        let what = format!("tensor info '{name}'");
        let n_dims = self.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(self.malformed(&what, format!("{n_dims} dimensions (max {MAX_DIMS})")));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(self.u64(&what)?);
        }
        let type_id = self.u32(&what)?;
        let offset = self.u64(&what)?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            path: self.path.to_path_buf(),
            tensor: name.clone(),
            type_id,
        })?;
        let elements = ne
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| i64::try_from(n).is_ok() && ne.iter().all(|&d| i64::try_from(d).is_ok()));
        let Some(elements) = elements else {
            return Err(self.malformed(&what, format!("dimensions {ne:?} overflow")));
        };
        let (block, _) = ty.block_layout();
        let row = ne.first().copied().unwrap_or(1);
        if !row.is_multiple_of(block) {
            return Err(self.malformed(
                &what,
                format!("row length {row} is not a multiple of {ty}'s block size {block}"),
            ));
        }
        let size_bytes =
            byte_size(ty, elements).ok_or_else(|| self.malformed(&what, format!("size of {ne:?} {ty} overflows")))?;
        if !offset.is_multiple_of(alignment) {
            return Err(self.malformed(
                &what,
                format!("data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        // Each dimension is at most the product, which fits in i64, so the casts are lossless
        // on 64-bit targets.
        let shape = ne.iter().rev().map(|&d| d as usize).collect();
        Ok(GgufTensorInfo {
            name,
            shape,
            ty,
            offset,
            size_bytes,
        })
    }
}
