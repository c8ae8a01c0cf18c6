"""Tiny random-weight models of each architecture and their transformers references.

For each architecture: a Hugging Face folder (config.json, model.safetensors in float32, a
263-token byte-level BPE tokenizer), the same model converted by llama.cpp's own
convert_hf_to_gguf.py to GGUF in f32 and q8_0 (not Mistral: see below), and reference.json: for a few prompts,
transformers' float32 greedy continuation and first-step logits (all of them), once on the
original weights (the folder and the f32 GGUF) and once on the q8_0 file's weights
dequantised by gguf-py (the q8_0 GGUF). The tests compare kiln against these without torch.

Random weights give near-uniform logits, so a greedy choice could be a near-tie that any
summation order flips: each case records `stable`, the number of leading greedy tokens
whose top-2 margin is at least MIN_MARGIN, and the script fails when that is short.

    python make_fixtures.py --llama-cpp DIR [--only ARCH ...]
    python make_fixtures.py --llama-cpp DIR --k-quants LLAMA_QUANTIZE

The second form makes llama-k/: the llama model 256 wide (K-quants pack rows in 256-element
super-blocks), converted to f32 GGUF and quantised by llama.cpp's own llama-quantize to
Q4_K_M, Q5_K_M and Q6_K (only the quantised files are kept), each with its reference on its
dequantised weights. llama-quantize is built from the same sdist
(`examples/llama_cpp_side_by_side.sh --build-quantize` prints its path).

DIR is llama.cpp's source tree (vendor/llama.cpp of the llama-cpp-python sdist the repo
pins, examples/llama_cpp_side_by_side.sh; `pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36`). Needs torch, transformers, tokenizers, numpy, sentencepiece
(made with torch 2.15.0 and transformers 5.24.0; PyPI's Linux torch wheel loads its CUDA
runtime libraries even on a CPU, so install it with its dependencies). CI needs none of this:
the outputs are committed.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

HERE = Path(__file__).resolve().parent
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROMPTS = [[5, 80, 81, 90, 100, 3, 7], [9, 12, 40], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]]
STEPS = 12
MIN_MARGIN = 0.05
MIN_STABLE = 6
WINDOW = 4  # short, so the prompts above run past it
# Seeds other than 0, where seed 0 gave near-ties (the script stops on those).
SEEDS = {"phi3": 1}

SHAPES = dict(vocab_size=263, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True,
              bos_token_id=1, eos_token_id=2)


def configs():
    """Per architecture: the config class, the model class and the config's extra settings."""
    t = transformers
    return {
        "llama": (t.LlamaConfig, t.LlamaForCausalLM,
                  dict(rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 32})),
        "qwen2": (t.Qwen2Config, t.Qwen2ForCausalLM, dict(use_sliding_window=False)),
        "qwen3": (t.Qwen3Config, t.Qwen3ForCausalLM, dict(use_sliding_window=False)),
        "mistral": (t.MistralConfig, t.MistralForCausalLM, dict(sliding_window=WINDOW)),
        "gemma3": (t.Gemma3TextConfig, t.Gemma3ForCausalLM,
                   dict(num_hidden_layers=6, sliding_window=WINDOW, query_pre_attn_scalar=16,
                        hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                        attn_logit_softcapping=None,
                        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
        "phi3": (t.Phi3Config, t.Phi3ForCausalLM,
                 dict(sliding_window=WINDOW, pad_token_id=0,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                       "original_max_position_embeddings": 256})),
    }


def write_tokenizer(out: Path):
    """A byte-level BPE over 256 byte tokens and four merges, after three special tokens."""
    byte_tokens = [pre_tokenizers.ByteLevel.alphabet()]
    alphabet = sorted(byte_tokens[0], key=lambda c: bytes_to_unicode_order()[c])
    vocab = {tok: i for i, tok in enumerate(SPECIALS + alphabet + ["Ġt", "he", "Ġthe", "lo"])}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "o")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPT2Tokenizer", "bos_token": SPECIALS[1], "eos_token": SPECIALS[2],
        "unk_token": SPECIALS[0], "pad_token": SPECIALS[0], "add_prefix_space": False,
        "model_max_length": 256}, indent=1))


def bytes_to_unicode_order():
    """GPT-2's byte → character table, as the order of byte values (kiln's tiny vocabulary)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


# The K-quant models: every projection's rows a whole number of 256-element super-blocks.
K_SHAPES = dict(SHAPES, hidden_size=256, intermediate_size=256, head_dim=64)
K_QUANTS = ["Q4_K_M", "Q5_K_M", "Q6_K"]


def build(arch: str, seed: int, shapes=SHAPES):
    config_class, model_class, extra = configs()[arch]
    config = config_class(**{**shapes, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma stores w for a (1 + w) gain.
                p.uniform_(-0.2, 0.2) if arch == "gemma3" else p.uniform_(0.8, 1.2)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.15)
        final = model.model.norm.weight
        final.fill_(3.0 if arch == "gemma3" else 4.0)
    return model


def greedy(model, prompt):
    """Greedy ids, the top-2 margin of every step and the first step's logits."""
    ids = list(prompt)
    margins, first = [], None
    with torch.no_grad():
        for step in range(STEPS):
            logits = model(torch.tensor([ids])).logits[0, -1].to(torch.float64)
            if step == 0:
                first = [float(v) for v in logits]
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            ids.append(int(top.indices[0]))
    generated = ids[len(prompt):]
    stable = next((i for i, m in enumerate(margins) if m < MIN_MARGIN), len(margins))
    return {"prompt_ids": list(prompt), "greedy_ids": generated, "stable": stable,
            "first_logits": first, "min_margin": min(margins[:max(stable, 1)])}


def reference(model, label):
    cases = [greedy(model, p) for p in PROMPTS]
    for c in cases:
        if c["stable"] < MIN_STABLE:
            sys.exit(f"{label}: only {c['stable']} stable greedy steps for prompt {c['prompt_ids']}; change the seed")
    return cases


def convert(llama_cpp: Path, hf: Path, out: Path, outtype: str):
    """llama.cpp's converter; the tiny tokenizer's pre-tokenizer hash is unknown to it, so it is
    told the GPT-2 family's `smollm` (digits split one by one, as kiln's default model)."""
    code = (
        "import runpy, sys\n"
        f"sys.path.insert(0, {str(llama_cpp)!r}); sys.path.insert(1, {str(llama_cpp / 'gguf-py')!r})\n"
        "import conversion.base as base\n"
        "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'smollm'\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(hf)!r}, '--outfile', {str(out)!r}, '--outtype', {outtype!r}]\n"
        f"runpy.run_path({str(llama_cpp / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)


def load_dequantised(model, arch: str, gguf_path: Path, llama_cpp: Path):
    """The model with every weight replaced by the GGUF file's, dequantised by gguf-py."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    reader = gguf.GGUFReader(str(gguf_path))
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
               for t in reader.tensors}
    arch_enum = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
                 "gemma3": gguf.MODEL_ARCH.GEMMA3,
                 "phi3": gguf.MODEL_ARCH.PHI3}[arch]
    names = gguf.get_tensor_name_map(arch_enum, model.config.num_hidden_layers)
    cfg = model.config
    with torch.no_grad():
        for name, p in model.named_parameters():
            base, suffix = name.rsplit(".", 1)
            gguf_name = names.get_name(base)
            if gguf_name is None:
                sys.exit(f"{arch}: no GGUF name for {name}")
            value = torch.tensor(np.asarray(tensors[f"{gguf_name}.{suffix}"], dtype=np.float32))
            if arch == "llama" and base.endswith(("q_proj", "k_proj")):
                heads = cfg.num_attention_heads if base.endswith("q_proj") else cfg.num_key_value_heads
                value = unpermute(value, heads)
            if arch == "gemma3" and name.endswith("norm.weight"):
                value = value - 1.0
            p.copy_(value.reshape(p.shape))
    return model


def unpermute(w, heads):
    """Undoes llama.cpp's interleaving of Q/K rows (LlamaModel.permute)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_k_quants(llama_cpp: Path, quantize: Path, arch: str = "llama", seed: int = 0):
    """<arch>-k/: the model 256 wide in each of K_QUANTS, with references on their weights."""
    out = HERE / f"{arch}-k"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    refs = {}
    with tempfile.TemporaryDirectory() as tmp:
        hf, f32 = Path(tmp) / "hf", Path(tmp) / f"{arch}-f32.gguf"
        hf.mkdir()
        model = build(arch, seed, K_SHAPES)
        model.save_pretrained(hf, safe_serialization=True)
        (hf / "generation_config.json").unlink(missing_ok=True)
        write_tokenizer(hf)
        convert(llama_cpp, hf, f32, "f32")
        for qtype in K_QUANTS:
            path = out / f"{arch}-{qtype.lower()}.gguf"
            subprocess.run([str(quantize), str(f32), str(path), qtype], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dequantised = load_dequantised(build(arch, seed, K_SHAPES), arch, path, llama_cpp)
            refs[qtype.lower()] = reference(dequantised, f"{arch} {qtype}")
            print(arch, qtype, [c["stable"] for c in refs[qtype.lower()]])
    (out / "reference.json").write_text(json.dumps({
        "architecture": arch, "seed": seed, "shapes": K_SHAPES, "transformers": transformers.__version__,
        "torch": torch.__version__, "quantizer": "llama-quantize (llama-cpp-python 0.3.36's llama.cpp)", **refs}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-cpp", required=True, type=Path)
    p.add_argument("--only", nargs="*")
    p.add_argument("--k-quants", type=Path, metavar="LLAMA_QUANTIZE")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.k_quants:
        make_k_quants(args.llama_cpp, args.k_quants)
        return
    for arch in args.only or list(configs()):
        out = HERE / arch
        shutil.rmtree(out, ignore_errors=True)
        hf = out / "hf"
        hf.mkdir(parents=True)
        seed = SEEDS.get(arch, 0)
        model = build(arch, seed)
        model.save_pretrained(hf, safe_serialization=True)
        (hf / "generation_config.json").unlink(missing_ok=True)
        write_tokenizer(hf)
        original = reference(model, f"{arch} f32")
        q8 = None
        # llama.cpp converts Mistral to a `llama` GGUF without its sliding window (and runs it
        # without one), which would not match the windowed reference: the folder only.
        if arch != "mistral":
            convert(args.llama_cpp, hf, out / f"{arch}-f32.gguf", "f32")
            convert(args.llama_cpp, hf, out / f"{arch}-q8_0.gguf", "q8_0")
            dequantised = load_dequantised(model, arch, out / f"{arch}-q8_0.gguf", args.llama_cpp)
            q8 = reference(dequantised, f"{arch} q8_0")
        (out / "reference.json").write_text(json.dumps({
            "architecture": arch, "seed": seed, "transformers": transformers.__version__, "torch": torch.__version__,
            "f32": original, "q8_0": q8}))
        print(arch, [c["stable"] for c in original], [c["stable"] for c in q8 or []])


if __name__ == "__main__":
    main()
