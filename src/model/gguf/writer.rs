//! Writing GGUF v3 files, so tests (and kiln's integration tests, which build a tiny random
//! Llama) can produce real model files without any external tooling.

use super::DEFAULT_ALIGNMENT;
use super::dequant::{byte_size, quantize};
use super::types::{GgufValue, GgufValueType};
use crate::kernels::GgmlType;
use std::io::{self, Write};
use std::path::Path;

struct PendingTensor {
    name: String,
    /// ggml order: innermost first.
    ne: Vec<u64>,
    ty: GgmlType,
    bytes: Vec<u8>,
}

/// Builds a GGUF v3 file in memory. Metadata keys keep insertion order; re-adding a key
/// replaces its value. The data alignment is `general.alignment` if set, else 32.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<PendingTensor>,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_metadata(&mut self, key: &str, value: impl Into<GgufValue>) -> &mut Self {
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    /// Adds a tensor given row-major f32 data, stored (quantised if need be) as `ty`.
    /// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1 (quantised types need the innermost
    /// dimension to be a multiple of 32).
    pub fn add_tensor_f32(&mut self, name: &str, shape: &[usize], data: &[f32], ty: GgmlType) -> io::Result<()> {
        let elements: usize = shape.iter().product();
        if elements != data.len() {
            return Err(invalid(format!(
                "tensor '{name}': shape {shape:?} has {elements} elements, data has {}",
                data.len()
            )));
        }
        let bytes = quantize(ty, data).map_err(|e| invalid(format!("tensor '{name}': {e}")))?;
        self.add_tensor_raw(name, shape, ty, bytes)
    }

    /// Adds a tensor whose bytes are already in `ty`'s block layout (e.g. to test how readers
    /// handle types kiln cannot dequantise).
    pub fn add_tensor_raw(&mut self, name: &str, shape: &[usize], ty: GgmlType, bytes: Vec<u8>) -> io::Result<()> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(invalid(format!("duplicate tensor '{name}'")));
        }
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let (block, _) = ty.block_layout();
        if !ne.first().copied().unwrap_or(1).is_multiple_of(block) {
            return Err(invalid(format!(
                "tensor '{name}': innermost dimension of {shape:?} is not a multiple of {ty}'s block size {block}"
            )));
        }
        let expected = byte_size(ty, ne.iter().product());
        if expected != Some(bytes.len() as u64) {
            return Err(invalid(format!(
                "tensor '{name}': {ty} {shape:?} needs {expected:?} bytes, got {}",
                bytes.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            ne,
            ty,
            bytes,
        });
        Ok(())
    }

    fn alignment(&self) -> io::Result<u64> {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, v)) => v
                .as_u64()
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| invalid(format!("general.alignment {v:?} is not a power of two"))),
        }
    }

    /// The complete file contents.
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let alignment = self.alignment()?;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            write_value(&mut out, value, key)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_string(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.bytes.len() as u64).next_multiple_of(alignment);
        }
        for t in &self.tensors {
            pad(&mut out, alignment);
            out.extend_from_slice(&t.bytes);
        }
        Ok(out)
    }

    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        let bytes = self.to_bytes()?;
        let mut file = std::fs::File::create(path)?;
        file.write_all(&bytes)?;
        file.sync_all()
    }
}

fn pad(out: &mut Vec<u8>, alignment: u64) {
    let len = (out.len() as u64).next_multiple_of(alignment) as usize;
    out.resize(len, 0);
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &GgufValue, key: &str) -> io::Result<()> {
    match value {
        GgufValue::U8(v) => out.push(*v),
        GgufValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Bool(v) => out.push(u8::from(*v)),
        GgufValue::String(s) => write_string(out, s),
        GgufValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        GgufValue::Array(items) => {
            // An empty array's element type is not recoverable from the value; u8 is as good
            // as any since readers see no elements.
            let elem = items.first().map_or(GgufValueType::U8, GgufValue::value_type);
            if items.iter().any(|v| v.value_type() != elem) {
                return Err(invalid(format!("metadata '{key}': mixed-type array")));
            }
            out.extend_from_slice(&(elem as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item, key)?;
            }
        }
    }
    Ok(())
}
