#!/usr/bin/env python3
"""A safetensors file written by the real `safetensors` package, for lorakv's reader test.

Writes F32, F16 and BF16 tensors of odd shapes (a scalar and an empty tensor too) plus
__metadata__. Tensor k holds value[i] = sin(i * 0.37 + k) * scale (i over the row-major
elements, computed in float64, then rounded to the dtype by torch). Beside it, a raw
file (same name, suffix .f32) holds every tensor converted to float32 by torch, in the
order of SPECS, concatenated little-endian: the C++ conversion must match it bit for bit.
tests/formats/safetensors_test.cpp holds the same table of names, shapes and scales.

Usage: safetensors_fixture.py --out fixture.safetensors
"""
import argparse
import os

import numpy as np
import torch
from safetensors.torch import save_file

# (name, dtype, shape, scale); scales reach f16 subnormals, f16's top range and bf16's.
SPECS = [
    ("f32.matrix", torch.float32, (3, 5), 1.0),
    ("f32.cube", torch.float32, (2, 3, 4), 1e-3),
    ("f32.scalar", torch.float32, (), 7.0),
    ("f32.empty", torch.float32, (0, 3), 1.0),
    ("f16.matrix", torch.float16, (5, 3), 1.0),
    ("f16.odd", torch.float16, (1, 7, 1), 6.0e4),
    ("f16.tiny", torch.float16, (11,), 1e-6),
    ("bf16.matrix", torch.bfloat16, (4, 6), 1.0),
    ("bf16.vector", torch.bfloat16, (9,), 1e30),
    ("bf16.row", torch.bfloat16, (1, 13), -3.0),
]
METADATA = {"format": "pt", "producer": "lorakv safetensors_fixture.py"}


def values(k, shape, scale):
    n = int(np.prod(shape, dtype=np.int64))
    return (np.sin(np.arange(n, dtype=np.float64) * 0.37 + k) * scale).reshape(shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the .safetensors file to write")
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    tensors = {}
    for k, (name, dtype, shape, scale) in enumerate(SPECS):
        tensors[name] = torch.from_numpy(values(k, shape, scale)).to(dtype).contiguous()
    save_file(tensors, args.out, metadata=METADATA)

    raw = os.path.splitext(args.out)[0] + ".f32"
    with open(raw, "wb") as f:
        for name, _, _, _ in SPECS:
            f.write(tensors[name].to(torch.float32).numpy().astype("<f4").tobytes())
    print(f"wrote {len(SPECS)} tensors to {args.out} and their float32 values to {raw}")


if __name__ == "__main__":
    main()
