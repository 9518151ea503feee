# Reference outputs of the Gemma 3n vision tower (timm mobilenetv5_300m_enc + embed_vision) for engine/vision's
# tests, computed with transformers + timm in float32 from the synthetic weights of
# testdata/gemma3n-synthetic-tiny.tar.gz (recipe.json) and its pixel_values.
#
# Two weight sets:
#   fixture: the recipe as is (layer-scale gammas ~1e-5, so residual branches barely show in the output);
#   strong:  the same, but every `layer_scale.gamma` regenerated with offset 0.25, scale 0.25 (same seeds), so
#            that every UIR and attention block moves the output.
# Output ($OUT/vision_ref.safetensors): per weight set V,
#   V.tower   [2048, 256]  MSFA output (channels x row*16+col)
#   V.embeds  [256, 64]    get_image_features (x sqrt(2048), embed_vision)
#   V.blk.NAME [4, H, W]   first 4 channels of conv_stem / blocks.S.J / msfa outputs (debugging)
import os, io, json, math, tarfile, time
import numpy as np
import torch
from safetensors.torch import save_file, load
from transformers import Gemma3nConfig, Gemma3nForConditionalGeneration

OUT = os.environ.get("OUT", "/tmp/out")
TAR = os.environ.get("TAR", "testdata/gemma3n-synthetic-tiny.tar.gz")
STRONG = (0.25, 0.25)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_grad_enabled(False)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
GOLD = 0x9E3779B97F4A7C15


def prng_uniform(seed, n):
    out = np.empty(n, dtype=np.float64)
    CH = 1 << 24
    with np.errstate(over="ignore"):
        for s in range(0, n, CH):
            i = np.arange(s + 1, min(n, s + CH) + 1, dtype=np.uint64)
            z = np.uint64(seed) + i * np.uint64(GOLD)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            out[s:s + len(i)] = (z >> np.uint64(40)).astype(np.float64) / 16777216.0 * 2.0 - 1.0
    return out


def member(tar, name):
    for m in tar.getmembers():
        if m.name.endswith("/" + name):
            return tar.extractfile(m).read()
    raise KeyError(name)


def main():
    t0 = time.time()
    os.makedirs(OUT, exist_ok=True)
    with tarfile.open(TAR) as tar:
        cfg = json.loads(member(tar, "config.json"))
        recipe = json.loads(member(tar, "recipe.json"))["tensors"]
        expect = load(member(tar, "expected.safetensors"))
    config = Gemma3nConfig.from_dict(cfg)
    config._attn_implementation = "eager"
    model = Gemma3nForConditionalGeneration(config).eval()
    params = dict(model.named_parameters())
    vis = [e for e in recipe if "vision" in e["name"]]
    missing = [n for n in params if "vision" in n and n not in {e["name"] for e in vis}]
    assert not missing, missing[:5]
    print("built", time.time() - t0, len(vis), flush=True)

    def fill(strong):
        for e in vis:
            off, sc = e["offset"], e["scale"]
            if strong and e["name"].endswith("layer_scale.gamma"):
                off, sc = STRONG
            n = int(np.prod(e["shape"]))
            w = (off + sc * prng_uniform(int(e["seed"], 16), n)).astype(np.float32).reshape(e["shape"])
            params[e["name"]].data.copy_(torch.from_numpy(w))

    for e in recipe:  # everything once (text, audio, embedders)
        if "vision" in e["name"]:
            continue
        n = int(np.prod(e["shape"]))
        w = (e["offset"] + e["scale"] * prng_uniform(int(e["seed"], 16), n)).astype(np.float32).reshape(e["shape"])
        params[e["name"]].data.copy_(torch.from_numpy(w))
    model = model.to(DEV)
    params = dict(model.named_parameters())
    tm = model.model.vision_tower.timm_model
    grabs = {}

    def hook(name):
        def f(mod, inp, out):
            grabs[name] = out[0, :4].detach().float().cpu().contiguous()
            if name == "msfa":
                grabs["__tower"] = out[0].reshape(out.shape[1], -1).detach().float().cpu().contiguous()
        return f

    tm.conv_stem.register_forward_hook(hook("stem"))
    for s, stage in enumerate(tm.blocks):
        for j, blk in enumerate(stage):
            blk.register_forward_hook(hook(f"{s}.{j}"))
    tm.msfa.register_forward_hook(hook("msfa"))
    pv = expect["pixel_values"].to(DEV)
    res = {}
    for V in ("fixture", "strong"):
        fill(V == "strong")
        grabs.clear()
        out = model.model.get_image_features(pv)
        emb = out if torch.is_tensor(out) else (out.pooler_output if hasattr(out, "pooler_output") else out[0])
        emb = emb[0].detach().float().cpu().contiguous()
        if V == "fixture":
            print("fixture check: max |emb - expected| =", float((emb - expect["vision_embeds"][0]).abs().max()), flush=True)
        res[V + ".embeds"] = emb
        res[V + ".tower"] = grabs.pop("__tower")
        for k, v in grabs.items():
            res[V + ".blk." + k] = v
        print(V, "tower rms", float(res[V + ".tower"].pow(2).mean().sqrt()), "emb rms", float(emb.pow(2).mean().sqrt()),
              time.time() - t0, flush=True)
    save_file(res, os.path.join(OUT, "vision_ref.safetensors"))
    # the small file the Go tests keep: strong-variant outputs only
    save_file({"tower": res["strong.tower"], "embeds": res["strong.embeds"]}, os.path.join(OUT, "strong_ref.safetensors"),
              metadata={"layer_scale_gamma_offset": str(STRONG[0]), "layer_scale_gamma_scale": str(STRONG[1])})
    print("done", time.time() - t0)


if __name__ == "__main__":
    main()
