"""Transformers' reference for the real Gemma 3 270M Q4_K_M file (`kiln fetch-model gemma3-270m`).

The GGUF's tensors are dequantised to float32 by gguf-py (`gguf.quants.dequantize`, the
reference dequantisation), llama.cpp's `1 + w` norm weights shifted back to `w`, and loaded
into transformers' Gemma3ForCausalLM (float32, CPU, eager attention) with the model's own
configuration (google/gemma-3-270m's config.json, checked against the GGUF's metadata below).
Prompts are tokenised by transformers' tokenizer converted from the GGUF's vocabulary; chat
prompts are rendered with Gemma 3's chat template (kiln's fallback for a Gemma 3 file without
one: this GGUF carries none). Each greedy step recomputes the whole sequence (no KV cache), so
the reference depends on no cache code.

    python make_reference.py GGUF_FILE    (writes reference.json beside this script)

Needs torch, transformers, gguf and numpy (made with torch 2.15.0, transformers 5.24.0,
gguf 0.18); CI needs none of it: reference.json is committed.
"""

import json
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers

HERE = Path(__file__).resolve().parent
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
STEPS = 16
TOP = 20
# Logits kept beyond the top ones: every SPREAD-th id, to check the tail of the vocabulary too.
SPREAD = 4099
# A greedy step whose top-2 margin is under this may legitimately flip under another
# summation order; `stable` counts the steps before the first such one.
MIN_MARGIN = 0.02

# The Gemma 3 chat template (google/gemma-3-*-it's tokenizer_config.json).
# Keep in step with src/model/arch/gemma3_chat.jinja.
CHAT_TEMPLATE = (HERE / "../../../src/model/arch/gemma3_chat.jinja").read_text()

LONG = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'yellow'][i % 4]} box holds {i * 7 % 13} stones." for i in range(1, 61))
CASES = [
    ("capital", "The capital of France is", None),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", None),
    ("unicode", "Übersetzung: «Guten Morgen» heißt auf Englisch", None),
    # Longer than the 512-token window of the local layers: their window and RoPE base matter.
    ("past_the_window", LONG + "\nQuestion: how many stones does item 61 hold? Answer:", None),
    ("chat", None, [{"role": "user", "content": "Write one sentence about the sea."}]),
    ("chat_system", None, [{"role": "system", "content": "You answer in French."},
                           {"role": "user", "content": "What colour is the sky?"}]),
]


def config_from(reader):
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
    c = transformers.Gemma3TextConfig(
        vocab_size=len(reader.fields["tokenizer.ggml.tokens"].data),
        hidden_size=meta["gemma3.embedding_length"],
        intermediate_size=meta["gemma3.feed_forward_length"],
        num_hidden_layers=meta["gemma3.block_count"],
        num_attention_heads=meta["gemma3.attention.head_count"],
        num_key_value_heads=meta["gemma3.attention.head_count_kv"],
        head_dim=meta["gemma3.attention.key_length"],
        max_position_embeddings=meta["gemma3.context_length"],
        rms_norm_eps=meta["gemma3.attention.layer_norm_rms_epsilon"],
        sliding_window=meta["gemma3.attention.sliding_window"],
        # google/gemma-3-270m: five windowed layers, then a global one.
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                     for i in range(meta["gemma3.block_count"])],
        query_pre_attn_scalar=meta["gemma3.attention.key_length"],
        hidden_activation="gelu_pytorch_tanh",
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        tie_word_embeddings=True,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": meta["gemma3.rope.freq_base"]},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )
    c._attn_implementation = "eager"
    return c


def load_model(path: Path):
    reader = gguf.GGUFReader(str(path))
    model = transformers.Gemma3ForCausalLM(config_from(reader)).to(torch.float32).eval()
    tensors = {t.name: t for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, model.config.num_hidden_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base, suffix = name.rsplit(".", 1)
            t = tensors[f"{names.get_name(base)}.{suffix}"]
            value = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
            value = torch.tensor(np.asarray(value, dtype=np.float32))
            if name.endswith("norm.weight"):
                value = value - 1.0  # llama.cpp stores Gemma's (1 + w) gain
            p.copy_(value.reshape(p.shape))
    model.tie_weights()
    return model


def greedy(model, prompt):
    ids = list(prompt)
    margins, first = [], None
    with torch.no_grad():
        for step in range(STEPS):
            logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float64)
            if step == 0:
                first = logits
            top = torch.topk(logits, 2)
            margins.append(round(float(top.values[0] - top.values[1]), 5))
            ids.append(int(top.indices[0]))
            if ids[-1] in (1, 106):  # <eos>, <end_of_turn>
                break
    top = torch.topk(first, TOP)
    spread = list(range(0, len(first), SPREAD))
    return {
        "greedy_ids": ids[len(prompt):],
        "top2_margins": margins,
        "stable": next((i for i, m in enumerate(margins) if m < MIN_MARGIN), len(margins)),
        "first_top": [[int(i), float(v)] for v, i in zip(top.values, top.indices)],
        "first_spread": [[i, float(first[i])] for i in spread],
    }


def main():
    path = Path(sys.argv[1])
    import hashlib
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {SHA256}")
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = load_model(path)
    cases = []
    for name, text, messages in CASES:
        if messages is not None:
            text = tokenizer.apply_chat_template(messages, chat_template=CHAT_TEMPLATE, tokenize=False,
                                                 add_generation_prompt=True)
            prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            prompt = tokenizer(text)["input_ids"]  # with <bos>: tokenizer.ggml.add_bos_token
        case = {"name": name, "messages": messages, "text": text, "prompt_ids": prompt, **greedy(model, prompt)}
        case["greedy_text"] = tokenizer.decode(case["greedy_ids"])
        print(name, len(prompt), case["stable"], repr(case["greedy_text"]), file=sys.stderr)
        cases.append(case)
    (HERE / "reference.json").write_text(json.dumps({
        "model": path.name, "gguf_sha256": SHA256,
        "weights": "every tensor dequantised to float32 by gguf-py; norm weights minus 1",
        "implementation": f"transformers {transformers.__version__} Gemma3ForCausalLM, torch {torch.__version__}, "
                          "CPU, float32, eager attention, no KV cache",
        "decoding": f"greedy, at most {STEPS} tokens, stops after <eos> (1) or <end_of_turn> (106)",
        "min_margin": MIN_MARGIN,
        "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
