//! An open GGUF file: typed metadata access and memory-mapped tensor access.

use super::GgufError;
use super::dequant::{DequantError, dequantize};
use super::parse::{GgufTensorInfo, parse_header};
use super::types::GgufValue;
use memmap2::Mmap;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A dequantised tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensor {
    /// Row-major, outermost dimension first.
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// An open, validated, memory-mapped GGUF file.
///
/// The map stays valid as long as nobody truncates the file underneath us; model files are
/// treated as immutable while the server runs, as llama.cpp does.
pub struct GgufFile {
    path: PathBuf,
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
    mmap: Mmap,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io_err = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        if len < 8 {
            // Also avoids mapping an empty file, which some platforms reject.
            return Err(GgufError::Truncated {
                path: path.to_path_buf(),
                what: "header".into(),
                offset: 0,
                needed: 8,
                file_len: len,
            });
        }
        // SAFETY: the map is read-only and model files are not modified while being served;
        // every access below is bounds-checked against the map's length.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        let header = parse_header(path, &mmap)?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            version: header.version,
            by_name: header
                .tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            metadata: header.metadata,
            tensors: header.tensors,
            alignment: header.alignment,
            data_start: header.data_start,
            mmap,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    pub fn metadata(&self) -> &BTreeMap<String, GgufValue> {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    /// Any integer type whose value fits in u32.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// Any integer type whose value fits in u64.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// f32, or f64 narrowed to f32.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    pub fn get_array(&self, key: &str) -> Option<&[GgufValue]> {
        self.get(key)?.as_array()
    }

    /// `None` if the key is absent, not an array, or holds a non-string element.
    pub fn get_string_array(&self, key: &str) -> Option<Vec<String>> {
        self.get_array(key)?
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// `None` if the key is absent, not an array, or an element is not an integer fitting i32.
    pub fn get_i32_array(&self, key: &str) -> Option<Vec<i32>> {
        self.get_array(key)?.iter().map(GgufValue::as_i32).collect()
    }

    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor's raw bytes in the map (for kernels that consume quantised blocks directly).
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], GgufError> {
        self.lookup(name).map(|(_, bytes)| bytes)
    }

    /// Drops the tensor's pages from the process's resident set once its contents have been
    /// copied (packed or widened): without this, every page the load read stays resident
    /// while the file is mapped, so loading peaked at the copies plus the whole file. The
    /// pages stay in the page cache, and a later read maps them back in. A hint: failure is
    /// harmless and ignored.
    pub fn release_tensor(&self, name: &str) {
        let Some(info) = self.tensor_info(name) else {
            return;
        };
        let start = (self.data_start + info.offset) as usize;
        #[cfg(unix)]
        // SAFETY: the map is read-only and file-backed, so `MADV_DONTNEED` only drops pages
        // that the next access reads back from the file, unchanged.
        let _ = unsafe {
            self.mmap
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, info.size_bytes as usize)
        };
        #[cfg(not(unix))]
        let _ = start;
    }

    fn lookup(&self, name: &str) -> Result<(&GgufTensorInfo, &[u8]), GgufError> {
        let info = self.tensor_info(name).ok_or_else(|| GgufError::MissingTensor {
            path: self.path.clone(),
            name: name.to_string(),
        })?;
        // Extents were validated against the file length in `open`.
        let start = (self.data_start + info.offset) as usize;
        Ok((info, &self.mmap[start..start + info.size_bytes as usize]))
    }

    /// Dequantises a tensor to f32, row-major.
    pub fn tensor_f32(&self, name: &str) -> Result<GgufTensor, GgufError> {
        let (info, bytes) = self.lookup(name)?;
        let data = dequantize(info.ty, bytes, info.n_elements()).map_err(|e| match e {
            DequantError::Unsupported(ty) => GgufError::UnsupportedTensorType {
                path: self.path.clone(),
                tensor: name.to_string(),
                ty,
            },
            other => GgufError::Malformed {
                path: self.path.clone(),
                what: format!("tensor '{name}'"),
                detail: other.to_string(),
            },
        })?;
        Ok(GgufTensor {
            shape: info.shape.clone(),
            data,
        })
    }
}
