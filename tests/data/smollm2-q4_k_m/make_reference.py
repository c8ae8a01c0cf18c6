"""Greedy reference for the default model re-quantised to Q4_K_M by llama.cpp's llama-quantize.

The cases (prompt text and ids) are those of the shared reference for the Q4_1 file
(`shared/reference/smollm2-greedy.json`); this script reruns them on the Q4_K_M file with an
independent implementation: Hugging Face transformers' `LlamaForCausalLM`, loaded from the
GGUF itself (`gguf_file=`: every tensor dequantised to float32 by gguf-py, Q/K rows
un-permuted), float32, eager attention, greedy with a KV cache, at most 32 new tokens,
stopping after `<|im_end|>` (id 2). The output has the shared reference's fields.

    python make_reference.py --gguf SmolLM2-135M-Instruct.Q4_K_M.gguf \
        --cases ../../../../shared/reference/smollm2-greedy.json

Needs torch, transformers (made with 5.24.0), accelerate (1.16.0: transformers wants it for
gguf_file=) and gguf; CI needs none of this: the output,
reference.json, is committed, and CI checks the file it makes has the sha256 recorded here.
"""

import argparse
import hashlib
import json
from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent
MAX_TOKENS = 32
EOS = 2
STABLE_MARGIN = 0.01


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def greedy(model, prompt_ids):
    ids, margins, top10 = [], [], None
    past = None
    inputs = torch.tensor([prompt_ids])
    with torch.no_grad():
        for step in range(MAX_TOKENS):
            out = model(input_ids=inputs, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].to(torch.float64)
            top = torch.topk(logits, 10)
            if step == 0:
                top10 = [[int(i), float(v)] for v, i in zip(top.values, top.indices)]
            margins.append(float(top.values[0] - top.values[1]))
            token = int(top.indices[0])
            ids.append(token)
            if token == EOS:
                break
            inputs = torch.tensor([[token]])
    return ids, margins, top10


def text(tokenizer, ids):
    """The text a server returns for `ids`: special tokens (the stop token) left out."""
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", required=True, type=Path)
    p.add_argument("--cases", required=True, type=Path)
    p.add_argument("--out", type=Path, default=HERE / "reference.json")
    args = p.parse_args()
    torch.set_num_threads(2)
    gguf = args.gguf.resolve()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    shared = json.loads(args.cases.read_text())
    cases = []
    for case in shared["cases"]:
        ids, margins, top10 = greedy(model, case["prompt_ids"])
        stable = next((i for i, m in enumerate(margins) if m < STABLE_MARGIN), len(margins))
        cases.append({
            "name": case["name"], "chat": case["chat"], "user": case.get("user"), "text": case["text"],
            "stable_prefix_tokens": stable,
            "stable_prefix_text": text(tokenizer, ids[:stable]),
            "prompt_ids": case["prompt_ids"], "greedy_ids": ids, "greedy_text": text(tokenizer, ids),
            "top2_margins": margins, "first_step_top10": top10,
        })
        print(case["name"], "stable", stable, "of", len(ids), repr(text(tokenizer, ids[:stable]))[:60])
    args.out.write_text(json.dumps({
        "model": gguf.name,
        "gguf_sha256": sha256(gguf),
        "made_by": "llama-quantize --allow-requantize SmolLM2-135M-Instruct.Q4_1.gguf OUT Q4_K_M "
                   "(llama.cpp vendored in llama-cpp-python 0.3.36)",
        "weights": "every tensor dequantised to float32 by gguf-py; Q/K rows un-permuted (transformers gguf_file=)",
        "implementation": f"transformers {transformers.__version__} LlamaForCausalLM, torch {torch.__version__}, "
                          "CPU, float32, eager attention, KV cache",
        "decoding": "greedy (argmax); stops after <|im_end|> (id 2) or the step limit",
        "cases": cases,
    }, indent=1))


if __name__ == "__main__":
    main()
