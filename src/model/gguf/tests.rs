//! Round trips through [`GgufWriter`] and [`GgufFile`], corruption handling, and a check
//! against the real SmolLM2 GGUF (`KILN_TEST_MODEL`).

use super::*;

fn write_tmp(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    std::io::Write::write_all(&mut f, bytes).expect("write");
    f
}

fn open_bytes(bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let f = write_tmp(bytes);
    GgufFile::open(f.path())
}

/// Deterministic pseudo-random values in [-scale, scale) (no rand dependency needed).
fn test_data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama")
        .add_metadata("u8", GgufValue::U8(200))
        .add_metadata("i8", GgufValue::I8(-5))
        .add_metadata("u16", GgufValue::U16(60000))
        .add_metadata("i16", GgufValue::I16(-30000))
        .add_metadata("u32", GgufValue::U32(4_000_000_000))
        .add_metadata("i32", GgufValue::I32(-7))
        .add_metadata("f32", GgufValue::F32(1e-5))
        .add_metadata("bool", true)
        .add_metadata("u64", GgufValue::U64(1 << 40))
        .add_metadata("i64", GgufValue::I64(42))
        .add_metadata("f64", GgufValue::F64(0.25))
        .add_metadata("strings", GgufValue::string_array(["a", "b c", "Ġ"]))
        .add_metadata("ints", GgufValue::Array(vec![GgufValue::I32(1), GgufValue::I32(-3)]))
        .add_metadata(
            "nested",
            GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::U8(1)])]),
        )
        .add_metadata("empty", GgufValue::Array(vec![]));
    w.add_tensor_f32("t", &[2, 64], &test_data(128, 1, 1.0), GgmlType::Q8_0)
        .expect("add");
    w
}

#[test]
fn metadata_round_trip() {
    let w = sample_writer();
    let f = write_tmp(&w.to_bytes().expect("bytes"));
    let g = GgufFile::open(f.path()).expect("open");
    assert_eq!(g.version(), 3);
    assert_eq!(g.metadata().len(), 16);
    assert_eq!(g.get("u8"), Some(&GgufValue::U8(200)));
    assert_eq!(g.get("i8"), Some(&GgufValue::I8(-5)));
    assert_eq!(g.get("u16"), Some(&GgufValue::U16(60000)));
    assert_eq!(g.get("i16"), Some(&GgufValue::I16(-30000)));
    assert_eq!(g.get("i64"), Some(&GgufValue::I64(42)));
    assert_eq!(g.get("f64"), Some(&GgufValue::F64(0.25)));
    assert_eq!(g.get_str("general.architecture"), Some("llama"));
    assert_eq!(g.get_u32("u8"), Some(200));
    assert_eq!(g.get_u32("u32"), Some(4_000_000_000));
    assert_eq!(g.get_u32("i64"), Some(42));
    assert_eq!(g.get_u32("i8"), None, "negative does not fit u32");
    assert_eq!(g.get_u32("u64"), None, "2^40 does not fit u32");
    assert_eq!(g.get_u64("u64"), Some(1 << 40));
    assert_eq!(g.get_f32("f32"), Some(1e-5));
    assert_eq!(g.get_f32("f64"), Some(0.25));
    assert_eq!(g.get_bool("bool"), Some(true));
    assert_eq!(
        g.get_string_array("strings"),
        Some(vec!["a".into(), "b c".into(), "Ġ".into()])
    );
    assert_eq!(g.get_i32_array("ints"), Some(vec![1, -3]));
    assert_eq!(g.get_string_array("ints"), None);
    assert_eq!(g.get_array("empty"), Some(&[][..]));
    assert_eq!(
        g.get("nested"),
        Some(&GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::U8(1)])]))
    );
}

/// Round trip per type. Tolerances (per element, `amax` = largest |x| in the 32-block):
/// F32 exact; F16 2^-11 relative; BF16 2^-8 relative; Q8_0 `amax/127/2` (half a step) plus
/// 0.1% of amax for the f16 scale; Q4_0 one full step `amax/8` (the side opposite the largest
/// magnitude clamps at q=15); Q4_1 half a step `(max-min)/15/2` plus 0.2% of amax for the f16
/// scale and minimum.
#[test]
fn tensor_round_trip_each_type() {
    let shape = [3usize, 4, 64];
    let data = test_data(3 * 4 * 64, 7, 2.5);
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
    ] {
        let mut w = GgufWriter::new();
        w.add_tensor_f32("w", &shape, &data, ty).expect("add");
        let g = open_bytes(&w.to_bytes().expect("bytes")).expect("open");
        let info = g.tensor_info("w").expect("info");
        assert_eq!((info.ty, info.shape.as_slice()), (ty, &shape[..]));
        let t = g.tensor_f32("w").expect("tensor");
        assert_eq!(t.shape, shape);
        for (block, back) in data.chunks(32).zip(t.data.chunks(32)) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (min, max) = block
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            for (x, y) in block.iter().zip(back) {
                let tol = match ty {
                    GgmlType::F32 => 0.0,
                    GgmlType::F16 => x.abs() * 2f32.powi(-11),
                    GgmlType::BF16 => x.abs() * 2f32.powi(-8),
                    GgmlType::Q8_0 => amax / 127.0 / 2.0 + amax * 1e-3,
                    GgmlType::Q4_0 => amax / 8.0 + amax * 1e-3,
                    _ => (max - min) / 15.0 / 2.0 + amax * 2e-3,
                };
                assert!((x - y).abs() <= tol, "{ty}: {x} vs {y} (tol {tol})");
            }
        }
    }
}

#[test]
fn alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", GgufValue::U32(64));
    w.add_tensor_f32("a", &[3], &[1.0, 2.0, 3.0], GgmlType::F32)
        .expect("add");
    w.add_tensor_f32("b", &[2], &[4.0, 5.0], GgmlType::F32).expect("add");
    let g = open_bytes(&w.to_bytes().expect("bytes")).expect("open");
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.tensor_info("b").expect("b").offset, 64);
    assert_eq!(g.tensor_f32("b").expect("b").data, vec![4.0, 5.0]);
    assert_eq!(g.tensor_f32("a").expect("a").data, vec![1.0, 2.0, 3.0]);
}

#[test]
fn truncation_at_every_cut_point_is_an_error() {
    let bytes = sample_writer().to_bytes().expect("bytes");
    // Every cut inside the header and metadata, then a stride through the data.
    let cuts = (0..bytes.len()).filter(|&n| n < 600 || n.is_multiple_of(7));
    for n in cuts {
        let err = open_bytes(&bytes[..n]).expect_err("truncated file must not open");
        assert!(matches!(err, GgufError::Truncated { .. }), "cut at {n}: {err}");
    }
    assert!(open_bytes(&bytes).is_ok());
}

#[test]
fn bad_magic_and_version() {
    let mut bytes = sample_writer().to_bytes().expect("bytes");
    bytes[..4].copy_from_slice(b"GGML");
    let err = open_bytes(&bytes).expect_err("bad magic");
    assert!(matches!(err, GgufError::BadMagic { .. }), "{err}");

    bytes[..4].copy_from_slice(b"GGUF");
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    let err = open_bytes(&bytes).expect_err("v1");
    assert!(err.to_string().contains("unsupported GGUF version 1"), "{err}");
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(open_bytes(&bytes).expect_err("BE").to_string().contains("big-endian"));

    // Version 2 shares v3's layout (u64 counts), so it opens.
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(open_bytes(&bytes).expect("v2").version(), 2);
}

/// A header with one key whose value is `value_bytes` (type id first).
fn one_key_file(value_bytes: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(value_bytes);
    b
}

#[test]
fn absurd_lengths_and_counts_are_rejected_without_allocating() {
    let mut arr = 9u32.to_le_bytes().to_vec();
    arr.extend(4u32.to_le_bytes());
    arr.extend(u64::MAX.to_le_bytes());
    let err = open_bytes(&one_key_file(&arr)).expect_err("array");
    assert!(matches!(err, GgufError::Truncated { .. }), "{err}");

    let mut s = 8u32.to_le_bytes().to_vec();
    s.extend((1u64 << 60).to_le_bytes());
    assert!(open_bytes(&one_key_file(&s)).is_err());

    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(u64::MAX.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    assert!(open_bytes(&b).is_err());
}

#[test]
fn metadata_element_budget_is_enforced() {
    let n = (16u64 << 20) + 1;
    let mut arr = 9u32.to_le_bytes().to_vec();
    arr.extend(0u32.to_le_bytes());
    arr.extend(n.to_le_bytes());
    arr.resize(arr.len() + n as usize, 0);
    let err = open_bytes(&one_key_file(&arr)).expect_err("too many elements");
    assert!(err.to_string().contains("exceed the metadata limit"), "{err}");
}

#[test]
fn corrupting_any_header_byte_never_panics() {
    let bytes = sample_writer().to_bytes().expect("bytes");
    let header_len = bytes.len() - 2 * 68; // the Q8_0 tensor is 2 blocks of 34 bytes
    for i in 0..header_len {
        for v in [0x00, 0x7f, 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            let _ = open_bytes(&b).map(|g| g.tensor_f32("t").map(|t| t.data.len()));
        }
    }
}

#[test]
fn scalar_quantised_tensor_is_malformed() {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b's');
    b.extend(0u32.to_le_bytes()); // n_dims
    b.extend(GgmlType::Q4_0.id().to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.resize(64 + 18, 0);
    let err = open_bytes(&b).expect_err("scalar Q4_0");
    assert!(err.to_string().contains("row length 1"), "{err}");
}

#[test]
fn unknown_types_are_named() {
    let err = open_bytes(&one_key_file(&77u32.to_le_bytes())).expect_err("value type");
    assert!(err.to_string().contains("unknown metadata value type 77"), "{err}");

    let mut w = GgufWriter::new();
    w.add_tensor_f32("x", &[32], &[0.0; 32], GgmlType::F32).expect("add");
    let mut bytes = w.to_bytes().expect("bytes");
    // Tensor info: header (24) + name (8 + 1) + n_dims (4) + ne (8), then the type id.
    bytes[45..49].copy_from_slice(&5u32.to_le_bytes());
    let err = open_bytes(&bytes).expect_err("tensor type");
    assert!(err.to_string().contains("'x' has unknown ggml type id 5"), "{err}");
}

#[test]
fn unsupported_and_missing_tensors_are_named() {
    let mut w = GgufWriter::new();
    w.add_tensor_raw("blk.0.q", &[256], GgmlType::IQ2_XXS, vec![0; 66])
        .expect("add");
    let g = open_bytes(&w.to_bytes().expect("bytes")).expect("open");
    let err = g.tensor_f32("blk.0.q").expect_err("iq2_xxs");
    assert!(err.to_string().contains("'blk.0.q' has type IQ2_XXS"), "{err}");
    let err = g.tensor_f32("nope").expect_err("missing");
    assert!(matches!(err, GgufError::MissingTensor { .. }), "{err}");
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor_f32("a", &[2, 3], &[0.0; 5], GgmlType::F32).is_err());
    assert!(w.add_tensor_f32("a", &[2, 16], &[0.0; 32], GgmlType::Q4_0).is_err());
    w.add_tensor_f32("a", &[1], &[0.0], GgmlType::F32).expect("add");
    assert!(w.add_tensor_f32("a", &[1], &[0.0], GgmlType::F32).is_err());
}

/// Expected values come from gguf-py 0.19 (`GGUFReader` + `gguf.quants.dequantize`).
#[test]
#[ignore = "needs the real model (KILN_TEST_MODEL); .ci/run provides it"]
fn real_smollm2_file() {
    let g = GgufFile::open(&crate::testing::real_model::model_path()).expect("open");
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.get_u32("llama.block_count"), Some(30));
    assert_eq!(g.get_str("tokenizer.ggml.model"), Some("gpt2"));
    assert_eq!(
        g.get_string_array("tokenizer.ggml.tokens").map(|t| t.len()),
        Some(49152)
    );
    let emb = g.tensor_info("token_embd.weight").expect("embd");
    assert_eq!((emb.shape.as_slice(), emb.ty), (&[49152, 576][..], GgmlType::Q8_0));
    let q = g.tensor_info("blk.0.attn_q.weight").expect("q");
    assert_eq!((q.shape.as_slice(), q.ty), (&[576, 576][..], GgmlType::Q4_1));

    // (name, first, second, last, sum, sum of |x|)
    let expected = [
        (
            "token_embd.weight",
            -0.10654449462890625,
            0.032978057861328125,
            -0.0417022705078125,
            -15353.04449415207,
            2802153.619805813,
        ),
        (
            "blk.0.attn_q.weight",
            -0.0963134765625,
            0.1573486328125,
            -0.255859375,
            59.22322082519531,
            63395.39872741699,
        ),
        (
            "blk.0.attn_norm.weight",
            0.01397705078125,
            0.0238037109375,
            -0.038330078125,
            0.6129436492919922,
            15.815359115600586,
        ),
        (
            "blk.29.ffn_down.weight",
            -0.2733154296875,
            0.186279296875,
            0.056640625,
            49.83570861816406,
            126250.91435241699,
        ),
    ];
    for (name, first, second, last, sum, abs) in expected {
        let t = g.tensor_f32(name).expect("tensor");
        let d = &t.data;
        assert_eq!(d.len(), t.shape.iter().product::<usize>());
        assert_eq!((d[0] as f64, d[1] as f64), (first, second), "{name}");
        assert_eq!(d[d.len() - 1] as f64, last, "{name}");
        let s: f64 = d.iter().map(|&v| v as f64).sum();
        let a: f64 = d.iter().map(|&v| (v as f64).abs()).sum();
        assert!(
            (s - sum).abs() <= 1e-9 * abs && (a - abs).abs() <= 1e-9 * abs,
            "{name}: {s} {a}"
        );
    }
}

#[test]
fn types_without_a_packed_kernel_are_widened_and_named() {
    let mut w = GgufWriter::new();
    w.add_tensor_raw("blk.0.attn_q.weight", &[2, 256], GgmlType::Q4_K, vec![0; 2 * 144])
        .expect("add");
    w.add_tensor_raw("blk.0.ffn_down.weight", &[1, 256], GgmlType::Q2_K, vec![0; 84])
        .expect("add");
    w.add_tensor_f32("blk.0.attn_k.weight", &[1, 32], &[0.5; 32], GgmlType::Q8_0)
        .expect("add");
    w.add_tensor_f32("output_norm.weight", &[32], &[1.0; 32], GgmlType::F32)
        .expect("add");
    let g = open_bytes(&w.to_bytes().expect("bytes")).expect("open");
    let widened: Vec<String> = g.types_widened_at_load().into_iter().collect();
    assert_eq!(widened, ["Q2_K"], "Q4_K and Q8_0 run packed");
    let q = g.tensor_f32("blk.0.attn_q.weight").expect("Q4_K widens");
    assert_eq!((q.shape.as_slice(), q.data.len()), ([2, 256].as_slice(), 512));
    assert!(q.data.iter().all(|v| *v == 0.0));
}
