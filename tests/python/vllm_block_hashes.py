"""vLLM's prefix-cache block hashes, as vLLM computes them, for checking kiln's
(src/kv_cache/block_hash.rs) against them.

The scheme follows vLLM's code line for line (vllm/utils/hashing.py `sha256_cbor`;
vllm/v1/core/kv_cache_utils.py `init_none_hash`, `hash_block_tokens` and
`maybe_convert_block_hash` of vLLM 0.11+; `sha256_cbor_64bit` and its integer `NONE_HASH` of
vLLM 0.10), with cbor2 as vLLM uses it (`cbor2.dumps(obj, canonical=True)`); vLLM itself (and
torch) is too large to install for this. Requests without LoRA, multimodal input or cache salt
have no extra keys (None), as kiln's.

Usage: vllm_block_hashes.py < {"algo": "sha256_cbor", "block_size": 4, "prompts": [[...], ...]}
(PYTHONHASHSEED from the environment, as vLLM reads it) prints one JSON line: per prompt, the
integer hash events publish for each full block.
"""

import hashlib
import json
import os
import sys

import cbor2


def sha256_cbor(value):
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def sha256_cbor_64bit(value):
    return int.from_bytes(sha256_cbor(value), "big") & ((1 << 64) - 1)


HASH_FUNCTIONS = {"sha256_cbor": sha256_cbor, "sha256_cbor_64bit": sha256_cbor_64bit}


def none_hash(hash_fn):
    """vLLM's NONE_HASH: the hash of PYTHONHASHSEED (a str), random when it is unset."""
    seed = os.getenv("PYTHONHASHSEED")
    if seed is None:
        raw = os.urandom(32)
        return raw if hash_fn is sha256_cbor else int.from_bytes(raw, "big")
    return hash_fn(seed)


def hash_block_tokens(hash_fn, seed_hash, parent, tokens, extra_keys=None):
    if not parent:
        parent = seed_hash
    return hash_fn((parent, tuple(tokens), extra_keys))


def external(block_hash):
    """What KV events publish (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): the low 64 bits."""
    if isinstance(block_hash, bytes):
        return int.from_bytes(block_hash, "big") & ((1 << 64) - 1)
    return block_hash


def prompt_hashes(algo, block_size, tokens, seed_hash=None):
    hash_fn = HASH_FUNCTIONS[algo]
    seed_hash = none_hash(hash_fn) if seed_hash is None else seed_hash
    hashes, parent = [], None
    for start in range(0, len(tokens) - len(tokens) % block_size, block_size):
        parent = hash_block_tokens(hash_fn, seed_hash, parent, tokens[start:start + block_size])
        hashes.append(parent)
    return hashes


def main():
    request = json.load(sys.stdin)
    algo, block_size = request["algo"], request["block_size"]
    seed_hash = none_hash(HASH_FUNCTIONS[algo])
    print(json.dumps([
        [external(h) for h in prompt_hashes(algo, block_size, prompt, seed_hash)]
        for prompt in request["prompts"]
    ]))


if __name__ == "__main__":
    main()
