"""A random-weight Llama with the default model's shapes, and its greedy reference.

Writes a Hugging Face folder (config.json, model.safetensors in float32, the tokenizer files
that `gpu_kit tokenizer` made from the default model) and a reference in the format of
`../shared/reference/smollm2-greedy.json`, computed by transformers in float32 on the CPU
(eager attention, KV cache), independently of the device under test.

Random weights at the usual scale give near-uniform logits, so a greedy choice would often
be a near-tie that any summation order flips. The final norm's gain spreads the logits and the
layers' scale keeps the residual stream from being just the token's own embedding (which,
with tied embeddings, makes the model repeat its input). Each case's stable prefix ends
before the first step whose top-2 margin is under `--min-margin`; the script fails when the
prefixes are short or the continuations degenerate, so a bad seed cannot pass unnoticed.

    python random_llama.py --tokenizer DIR --out MODEL_DIR --reference REF.json
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build_model(shapes: dict, seed: int, layer_std: float, embed_std: float, norm_gain: float):
    config = LlamaConfig(
        **shapes,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        initializer_range=layer_std,
        torch_dtype="float32",
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, embed_std)
        model.model.norm.weight.fill_(norm_gain)
        for layer in model.model.layers:
            layer.input_layernorm.weight.uniform_(0.8, 1.2)
            layer.post_attention_layernorm.weight.uniform_(0.8, 1.2)
    return model


def greedy(model, prompt: list, steps: int):
    """Greedy ids, the top-2 margin of every step and the first step's top 10 logits."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=steps, min_new_tokens=steps,
                              do_sample=False, output_logits=True, output_scores=True,
                              return_dict_in_generate=True, pad_token_id=0)
    ids = [int(t) for t in out.sequences[0, len(prompt):]]
    # Raw logits where transformers returns them (4.38 and later); greedy scores are the same
    # values without logits processors.
    step_logits = getattr(out, "logits", None) or out.scores
    margins, first_top10 = [], None
    for step, logits in enumerate(step_logits):
        top = torch.topk(logits[0].to(torch.float64), 10)
        if step == 0:
            first_top10 = [[int(i), float(v)] for v, i in zip(top.values, top.indices)]
        margins.append(float(top.values[0] - top.values[1]))
    return ids, margins, first_top10


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", required=True, type=Path, help="gpu_kit tokenizer's folder")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--reference", required=True, type=Path)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layer-std", type=float, default=0.1)
    p.add_argument("--embed-std", type=float, default=0.02)
    p.add_argument("--norm-gain", type=float, default=32.0)
    p.add_argument("--min-margin", type=float, default=0.02,
                   help="top-2 logit margin below which a greedy choice counts as a near-tie")
    p.add_argument("--min-stable", type=int, default=16,
                   help="fail unless every case's stable prefix is at least this long")
    a = p.parse_args()

    shapes = json.loads((a.tokenizer / "shapes.json").read_text())
    start = time.time()
    model = build_model(shapes, a.seed, a.layer_std, a.embed_std, a.norm_gain)
    a.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(a.tokenizer / name, a.out / name)

    vocab = shapes["vocab_size"]
    prompts = {
        "short": [504, 3575, 282, 4649, 314],
        "ids-spread": [(100 + i * 37) % vocab for i in range(40)],
        "one-token": [12],
        "long": [(7 + i * 911) % vocab for i in range(300)],
    }
    cases, problems = [], []
    for name, prompt in prompts.items():
        ids, margins, top10 = greedy(model, prompt, a.steps)
        stable = next((i for i, m in enumerate(margins) if m < a.min_margin), len(margins))
        distinct = len(set(ids))
        print(f"{name}: stable prefix {stable}/{a.steps}, {distinct} distinct tokens, "
              f"smallest margin {min(margins):.3f}, first margin {margins[0]:.3f}")
        if stable < a.min_stable:
            problems.append(f"{name}: stable prefix {stable} < {a.min_stable}")
        if distinct < a.steps // 4:
            problems.append(f"{name}: only {distinct} distinct tokens in {a.steps}")
        cases.append({"name": name, "prompt_ids": prompt, "greedy_ids": ids,
                      "stable_prefix_tokens": stable, "top2_margins": margins,
                      "first_step_top10": top10})
    reference = {
        "model": f"random Llama, seed {a.seed}, shapes of {a.tokenizer / 'shapes.json'}",
        "weights": f"float32; layers N(0, {a.layer_std}), embeddings N(0, {a.embed_std}), "
                   f"final norm gain {a.norm_gain}",
        "implementation": f"transformers LlamaForCausalLM, torch {torch.__version__}, CPU, "
                          "float32, eager attention, KV cache",
        "decoding": "greedy (argmax), fixed step count",
        "min_margin": a.min_margin,
        "cases": cases,
    }
    a.reference.write_text(json.dumps(reference, indent=1))
    print(f"wrote {a.out} and {a.reference} in {time.time() - start:.0f} s")
    if problems:
        raise SystemExit("reference not usable: " + "; ".join(problems))


if __name__ == "__main__":
    main()
