//! K-quant files made by llama.cpp's own `llama-quantize` against transformers on each file's
//! dequantised weights: the tiny llama model, 256 wide (K-quants pack rows in 256-element
//! super-blocks), in Q4_K_M, Q5_K_M and Q6_K (`tests/data/tiny/make_fixtures.py --k-quants`).
//! Their Q4_K, Q5_K and Q6_K tensors run on the packed kernels.

use std::collections::BTreeSet;

use kiln::kernels::GgmlType;
use kiln::model::gguf::GgufFile;

use crate::arch_parity::{files_match_reference, fixture, read_reference};

#[test]
fn llama_quantize_k_quant_files_match_transformers() {
    let dir = fixture("llama-k");
    let reference = read_reference(&dir);
    let mut files = Vec::new();
    for (quant, k_types) in [
        ("q4_k_m", &[GgmlType::Q4_K, GgmlType::Q6_K][..]),
        ("q5_k_m", &[GgmlType::Q5_K, GgmlType::Q6_K][..]),
        ("q6_k", &[GgmlType::Q6_K][..]),
    ] {
        let path = dir.join(format!("llama-{quant}.gguf"));
        let file = GgufFile::open(&path).expect("fixture");
        let types: BTreeSet<String> = file.tensors().iter().map(|t| t.ty.to_string()).collect();
        for ty in k_types {
            assert!(types.contains(&ty.to_string()), "{quant}: no {ty} tensor in {types:?}");
        }
        assert!(
            file.types_widened_at_load().is_empty(),
            "{quant}: {types:?} all run packed"
        );
        files.push((path, &reference[quant]));
    }
    files_match_reference(&files);
}
