//! Every widened type against gguf-py's `gguf.quants.dequantize` on blocks of random bytes
//! (tests/data/quants/dequant-reference.json, made by the script beside it): bit for bit.

use super::super::dequantize;
use crate::kernels::GgmlType;

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn widened_types_match_gguf_py_bit_for_bit() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quants/dequant-reference.json");
    let text = std::fs::read_to_string(path).expect("fixture");
    let fixture: serde_json::Value = serde_json::from_str(&text).expect("json");
    let types = fixture["types"].as_object().expect("types");
    let expected_types = [
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ];
    assert_eq!(types.len(), expected_types.len());
    for ty in expected_types {
        let case = &types[&ty.to_string()];
        let bytes = hex(case["bytes"].as_str().expect("bytes"));
        let reference: Vec<u32> = hex(case["f32_le"].as_str().expect("f32_le"))
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let got = dequantize(ty, &bytes, reference.len()).expect("dequantize");
        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        let first_difference = got.iter().zip(&reference).position(|(a, b)| a != b);
        assert_eq!(first_difference, None, "{ty}: first differing element");
        assert_eq!(got.len(), reference.len(), "{ty}");
    }
}
