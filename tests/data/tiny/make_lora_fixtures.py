"""Tiny random-weight LoRA adapters made by PEFT on the tiny models, and their references.

For each adapter: a PEFT folder (adapter_config.json, adapter_model.safetensors in float32)
under tests/data/tiny/<arch>/lora/<name>/, and reference.json beside them: for the same
prompts as make_fixtures.py, transformers + PEFT's float32 greedy continuation and
first-step logits (all of them), with `stable` counted as there (leading greedy tokens whose
top-2 margin is at least MIN_MARGIN; the script fails when that is short).

The adapters' A and B are drawn from N(0, 0.15) (0.4 on Gemma 3) (PEFT starts B at zero, which would make
the adapter a no-op). The script checks that each moves some first-step logit by at least
MIN_LOGIT_CHANGE and prints in how many prompts it changes the greedy tokens (in all of them
but Gemma 3's, whose greedy tokens follow the scaled tied embedding of the last token).

    python make_lora_fixtures.py [ARCH ...]
    python make_lora_fixtures.py --gguf LLAMA_CPP_DIR

The second form converts the adapters in GGUF_ADAPTERS with llama.cpp's own converter
(`convert_lora_to_gguf.py` in LLAMA_CPP_DIR, e.g. the llama-cpp-python 0.3.36 sdist's
vendor/llama.cpp, with its gguf-py) to <arch>/lora/<name>.gguf, float32, the base's HF
folder as `--base`; they share the PEFT folder's reference.json. It is:

    PYTHONPATH=$LLAMA_CPP_DIR/gguf-py:$LLAMA_CPP_DIR python $LLAMA_CPP_DIR/convert_lora_to_gguf.py \
        --base <arch>/hf --outtype f32 --outfile <arch>/lora/<name>.gguf <arch>/lora/<name>

Needs torch, transformers, peft, numpy (made with the versions recorded in each
reference.json). Run make_fixtures.py first: the base models are its outputs. CI needs none
of this: the outputs are committed.
"""

import json
import os
import shutil
import subprocess
import sys

import torch
import transformers
import peft
from peft import LoraConfig, get_peft_model

from make_fixtures import HERE, MIN_STABLE, reference

LLAMA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PHI3_MODULES = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]

# (architecture, adapter name, seed, LoraConfig settings); STD: the A and B entries' spread
# (Gemma 3's q/k norms and post-norms damp an adapter: it needs larger ones to change tokens).
ADAPTERS = [
    ("llama", "all", 10, dict(r=4, lora_alpha=8, target_modules=LLAMA_MODULES)),
    ("llama", "rs", 11, dict(r=2, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"])),
    ("llama", "mlp", 12, dict(r=8, lora_alpha=8, target_modules=["gate_proj", "up_proj"])),
    ("qwen2", "all", 20, dict(r=4, lora_alpha=8, target_modules=LLAMA_MODULES)),
    ("gemma3", "all", 30, dict(r=4, lora_alpha=8, target_modules=LLAMA_MODULES)),
    ("phi3", "all", 40, dict(r=4, lora_alpha=8, target_modules=PHI3_MODULES)),
]


# Converted to GGUF LoRA by llama.cpp's converter (`--gguf`): Llama's (whose Q/K rows the
# converter permutes), Phi-3's fused qkv and gate_up, Gemma 3's.
GGUF_ADAPTERS = [("llama", "all"), ("phi3", "all"), ("gemma3", "all")]

STD = {"gemma3": 0.4}
# The least change of some first-step logit an adapter must make (far above the tests' 1e-3).
MIN_LOGIT_CHANGE = 0.5


def convert_to_gguf(llama_cpp):
    env = dict(os.environ, PYTHONPATH=f"{llama_cpp}/gguf-py:{llama_cpp}")
    for arch, name in GGUF_ADAPTERS:
        out = HERE / arch / "lora" / f"{name}.gguf"
        subprocess.run([sys.executable, f"{llama_cpp}/convert_lora_to_gguf.py", "--base", HERE / arch / "hf",
                        "--outtype", "f32", "--outfile", out, HERE / arch / "lora" / name], env=env, check=True)
        print(arch, name, "->", out)


def main():
    if sys.argv[1:2] == ["--gguf"]:
        convert_to_gguf(sys.argv[2])
        return
    torch.set_num_threads(1)
    only = set(sys.argv[1:])
    for arch, name, seed, settings in ADAPTERS:
        if only and arch not in only:
            continue
        base_dir = HERE / arch / "hf"
        base = transformers.AutoModelForCausalLM.from_pretrained(
            base_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
        base_cases = reference(base, f"{arch} base")
        model = get_peft_model(base, LoraConfig(lora_dropout=0.0, bias="none", **settings))
        torch.manual_seed(seed)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_A" in pname or "lora_B" in pname:
                    p.normal_(0.0, STD.get(arch, 0.15))
        model.eval()
        cases = reference(model, f"{arch} {name}")
        moved = max(abs(a - b) for c, bc in zip(cases, base_cases)
                    for a, b in zip(c["first_logits"], bc["first_logits"]))
        if moved < MIN_LOGIT_CHANGE:
            sys.exit(f"{arch} {name}: the adapter moves no first-step logit by {MIN_LOGIT_CHANGE}; change the seed")
        changed = sum(c["greedy_ids"] != bc["greedy_ids"] for c, bc in zip(cases, base_cases))
        out = HERE / arch / "lora" / name
        shutil.rmtree(out, ignore_errors=True)
        model.save_pretrained(out, safe_serialization=True)
        (out / "README.md").unlink(missing_ok=True)
        # The base's folder as the script saw it would be this machine's path.
        config = json.loads((out / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = f"tiny-{arch}"
        (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (out / "reference.json").write_text(json.dumps({
            "architecture": arch, "adapter": name, "seed": seed, "transformers": transformers.__version__,
            "peft": peft.__version__, "torch": torch.__version__, "f32": cases}))
        print(arch, name, "stable", [c["stable"] for c in cases], f"max logit change {moved:.2f},",
              f"greedy tokens changed in {changed} of {len(cases)} prompts")


if __name__ == "__main__":
    main()
