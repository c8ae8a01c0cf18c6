"""Reference dequantisations for src/model/gguf/dequant/widened/tests.rs: blocks of random bytes of each
ggml type kiln widens at load, and what gguf-py's `gguf.quants.dequantize` makes of them,
written to dequant-reference.json (bytes and f32 bit patterns, hex).

The random bytes are kept, except that each f16 scale is redrawn until finite, so that every
value is a number and the comparison is exact bit for bit.

Usage: pip install gguf==0.19.0 numpy; python make_dequant_fixtures.py > dequant-reference.json
"""

import json

import numpy as np
from gguf import GGMLQuantizationType, GGML_QUANT_SIZES
from gguf.quants import dequantize

BLOCKS = 4
# Byte offsets of each block's f16 scales.
HALVES = {
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
    "IQ4_NL": [0],
    "IQ4_XS": [0],
}


def main():
    rng = np.random.default_rng(27)
    out = {"gguf": "0.19.0", "types": {}}
    for name, halves in HALVES.items():
        qtype = GGMLQuantizationType[name]
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        data = rng.integers(0, 256, size=(BLOCKS, type_size), dtype=np.uint8)
        for block in data:
            for at in halves:
                while not np.isfinite(block[at : at + 2].view(np.float16)[0]):
                    block[at : at + 2] = rng.integers(0, 256, size=2, dtype=np.uint8)
        values = dequantize(data.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == BLOCKS * block_size and np.isfinite(values).all(), name
        out["types"][name] = {"bytes": data.tobytes().hex(), "f32_le": values.tobytes().hex()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
