#!/usr/bin/env python3
"""Independent implementation of the synthetic-weight recipe (fixtures README).

Prints (tensor, flat index, float32 bits) triples that recipe_test.go hard-codes.
Usage: recipe_values.py RECIPE_DIR
"""
import json
import struct
import sys

M = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M
    return h


def value(seed, offset, scale, i):
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    z = z ^ (z >> 31)
    u = (z >> 40) / 2**24 * 2 - 1
    w = offset + scale * u
    return struct.unpack("<I", struct.pack("<f", w))[0]  # round to float32


def main():
    d = sys.argv[1]
    r = json.load(open(d + "/recipe.json"))
    base = int(r["prng"]["base_seed"], 16) if isinstance(r["prng"], dict) else None
    want = [
        ("model.language_model.embed_tokens.weight", [0, 1, 63, 64, 2 * 64 + 5, 262399 * 64 + 63]),
        ("model.language_model.embed_tokens_per_layer.weight", [0, 12345, 25165823]),
        ("model.language_model.layers.0.self_attn.q_proj.weight", [0, 7, 100]),
        ("model.language_model.layers.3.input_layernorm.weight", [0, 1, 63]),
        ("model.vision_tower.timm_model.conv_stem.conv.weight", [0, 1000, 1727]),
    ]
    by = {t["name"]: t for t in r["tensors"]}
    for name, idx in want:
        t = by[name]
        seed = int(t["seed"], 16)
        if base is not None:
            assert seed == fnv1a64(name) ^ base, name
        for i in idx:
            print('{"%s", %d, 0x%08x},' % (name, i, value(seed, t["offset"], t["scale"], i)))


main()
