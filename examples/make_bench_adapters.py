#!/usr/bin/env python3
"""Random LoRA adapters with a GGUF base model's shapes, for the LoRA speed benchmark
(examples/bench_lora.rs): PEFT folders (adapter_config.json + adapter_model.safetensors,
float32), on every linear target (q/k/v/o, gate/up/down), A and B drawn from N(0, 0.02).
The shapes are read from the GGUF's metadata; nothing is fetched. Standard library only.

    python3 examples/make_bench_adapters.py MODEL.gguf OUT_DIR [--count 4] [--rank 16] [--seed 0]

writes OUT_DIR/a1 .. OUT_DIR/aN, and OUT_DIR/base/config.json: the base's Hugging Face config
written from the same metadata, which llama.cpp's convert_lora_to_gguf.py takes as `--base`
(with `--llama-cpp DIR`, the script runs that converter on each adapter too, to
OUT_DIR/aK.gguf: DIR is llama.cpp's source with gguf-py, and the Python running this needs
torch, transformers and numpy for it).
"""

import argparse
import array
import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

# GGUF metadata value types (gguf-py's GGUFValueType): the size of each scalar's struct code.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


def gguf_metadata(path):
    """The key/value metadata of a GGUF file (arrays of strings are skipped over)."""
    with open(path, "rb") as f:
        def read(fmt):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))[0]

        def string():
            return f.read(read("Q")).decode("utf-8", "replace")

        def value(ty):
            if ty in SCALARS:
                return read(SCALARS[ty])
            if ty == STRING:
                return string()
            if ty == ARRAY:
                item, n = read("I"), read("Q")
                if item in SCALARS:
                    f.seek(n * struct.calcsize("<" + SCALARS[item]), os.SEEK_CUR)
                else:
                    for _ in range(n):
                        value(item)
                return None
            sys.exit(f"{path}: unknown GGUF value type {ty}")

        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        read("I")  # version
        read("Q")  # tensor count
        meta = {}
        for _ in range(read("Q")):
            key = string()
            meta[key] = value(read("I"))
        return meta


def hf_config(meta):
    arch = meta["general.architecture"]
    if arch != "llama":
        sys.exit(f"architecture {arch}: this script writes Llama configs only")
    g = lambda key: meta[f"{arch}.{key}"]
    heads = g("attention.head_count")
    hidden = g("embedding_length")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": g("feed_forward_length"),
        "num_hidden_layers": g("block_count"), "num_attention_heads": heads,
        "num_key_value_heads": meta.get(f"{arch}.attention.head_count_kv", heads),
        "head_dim": hidden // heads, "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
        "rope_theta": meta.get(f"{arch}.rope.freq_base", 10000.0),
        "max_position_embeddings": g("context_length"),
        "vocab_size": meta.get(f"{arch}.vocab_size") or 49152, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }


def shapes(c):
    """(module, outputs, inputs) of every linear target."""
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    h, ffn = c["hidden_size"], c["intermediate_size"]
    return [("self_attn.q_proj", q, h), ("self_attn.k_proj", kv, h), ("self_attn.v_proj", kv, h),
            ("self_attn.o_proj", h, q), ("mlp.gate_proj", ffn, h), ("mlp.up_proj", ffn, h),
            ("mlp.down_proj", h, ffn)]


def write_safetensors(path, tensors):
    """tensors: [(name, shape, array('f'))], written as safetensors float32."""
    header, offset = {}, 0
    for name, shape, data in tensors:
        size = len(data) * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, data in tensors:
            f.write(data.tobytes())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gguf")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--llama-cpp", help="llama.cpp's source: convert each adapter to GGUF too")
    args = p.parse_args()
    config = hf_config(gguf_metadata(args.gguf))
    out = Path(args.out)
    (out / "base").mkdir(parents=True, exist_ok=True)
    (out / "base" / "config.json").write_text(json.dumps(config, indent=2))
    rng = random.Random(args.seed)
    r = args.rank
    for k in range(1, args.count + 1):
        folder = out / f"a{k}"
        folder.mkdir(parents=True, exist_ok=True)
        tensors = []
        for layer in range(config["num_hidden_layers"]):
            for module, outputs, inputs in shapes(config):
                prefix = f"base_model.model.model.layers.{layer}.{module}"
                for suffix, shape in (("lora_A", [r, inputs]), ("lora_B", [outputs, r])):
                    data = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(shape[0] * shape[1])))
                    tensors.append((f"{prefix}.{suffix}.weight", shape, data))
        write_safetensors(folder / "adapter_model.safetensors", tensors)
        (folder / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "r": r, "lora_alpha": 2 * r, "bias": "none", "lora_dropout": 0.0,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            "base_model_name_or_path": Path(args.gguf).name, "task_type": "CAUSAL_LM"}, indent=2))
        print(folder)
        if args.llama_cpp:
            env = dict(os.environ, PYTHONPATH=f"{args.llama_cpp}/gguf-py:{args.llama_cpp}")
            subprocess.run([sys.executable, f"{args.llama_cpp}/convert_lora_to_gguf.py", "--base", out / "base",
                            "--outtype", "f32", "--outfile", out / f"a{k}.gguf", folder], env=env, check=True)


if __name__ == "__main__":
    main()
