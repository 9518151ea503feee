"""gpu_compare.py OUT: the table of build/gpu-compare.sh, from its files.

Reads OUT/verdict.json (verdict bench --json --device cuda, the limits
measured), OUT/verdict.err (its stderr, with VERDICT_GRAPH_KERNELS' lines),
OUT/chain.txt (native/cuda/bench/chain_floor.cu's output: what a kernel of
a chain of dependent ones costs on the card),
OUT/ablate-*.json (the same bench with one switch off) and OUT/llamacpp/
(llamacpp-peer.sh bench's bench.jsonl and batched.jsonl), and prints
Markdown: the figures side by side with the goals of issue 25 and each
figure's share of its limit, then the ablation. A missing input leaves its
cells as "-" and says why under the table.
"""

import glob
import json
import os
import re
import sys

# Issue 25's goals (E2B shape, q4, H200): figure -> (goal, higher is better).
GOALS = {
    "prefill": (40000, True),
    "decode": (1000, True),
    "decode8": (5000, True),
    "scorer": (20, False),
    "image": (15, False),
    "audio": (20, False),
    "kernels": (150, False),
}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def fmt(v, digits=1):
    if v is None:
        return "-"
    if v == int(v) or abs(v) >= 1000:
        return "{:,.0f}".format(v)
    return "{:.{}f}".format(v, digits)


def verdict_figures(rep, err_text):
    """The figures of one verdict bench report (None where absent)."""
    f = dict.fromkeys(GOALS)
    if not rep or not rep.get("models"):
        return f
    m = rep["models"][0]
    f["prefill"] = (m.get("prefill") or {}).get("tokens_per_second")
    f["prefill_gflops"] = (m.get("prefill") or {}).get("gflop_per_s")
    dec = m.get("decode") or {}
    f["decode"] = dec.get("tokens_per_second")
    f["decode_bytes"] = dec.get("bytes_per_token")
    f["decode8"] = (m.get("decode_batch") or {}).get("tokens_per_second")
    sc = m.get("scorer") or {}
    if sc.get("seconds"):
        f["scorer"] = 1000 * sc["seconds"]
        f["scorer_prefix"] = 1000 * sc.get("prefix_prefill_seconds", 0)
    tw = rep.get("towers") or {}
    f["image"] = (tw.get("vision") or {}).get("ms_per_image")
    f["audio"] = (tw.get("audio") or {}).get("ms")
    f["audio_seconds"] = (tw.get("audio") or {}).get("audio_seconds")
    bodies = [int(n) for n in re.findall(r"recorded a loop's body: (\d+) kernels", err_text or "")]
    f["kernels"] = bodies[0] if bodies else None
    lim = rep.get("device_limits") or {}
    f["read_gbs"] = lim.get("read_gb_per_s")
    f["fp32_tflops"] = lim.get("fp32_tflop_per_s")
    return f


def llama_figures(res):
    """llama.cpp's best figure of each kind (flash attention off or on)."""
    f = dict.fromkeys(["prefill", "decode", "decode8"])
    for r in jsonl(os.path.join(res, "bench.jsonl")):
        kind = "prefill" if r.get("n_prompt", 0) > 0 else "decode"
        if f[kind] is None or r.get("avg_ts", 0) > f[kind]:
            f[kind] = r.get("avg_ts")
    for r in jsonl(os.path.join(res, "batched.jsonl")):
        if r.get("pl") == 8 and "speed_tg" in r:
            if f["decode8"] is None or r["speed_tg"] > f["decode8"]:
                f["decode8"] = r["speed_tg"]
    return f


def chain_floor(path):
    """The chain's floor in µs a kernel (a graph of one-block kernels
    with PDL), or None."""
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"graph 1-block ops\s+pdl=1: ([0-9.]+) us/op", line)
                if m:
                    return float(m.group(1))
    except OSError:
        pass
    return None


def share(v, limit):
    return "-" if v is None or not limit else "{:.1f}%".format(100 * v / limit)


def main(out):
    err = ""
    try:
        with open(os.path.join(out, "verdict.err")) as fh:
            err = fh.read()
    except OSError:
        pass
    rep = load(os.path.join(out, "verdict.json"))
    v = verdict_figures(rep, err)
    ll = llama_figures(os.path.join(out, "llamacpp"))
    notes = []
    if rep is None:
        notes.append("verdict.json is missing or not JSON: verdict's column is empty.")
    if all(x is None for x in ll.values()):
        notes.append("no llama.cpp results under llamacpp/: its column is empty.")

    # The limits: decode reads bytes_per_token a token, so the card's read
    # bandwidth bounds it at read_gbs·1e9/bytes tokens/s (batch 8: the
    # same weights serve 8 tokens, so 8 times that, less the keys).
    floor = None
    if v.get("read_gbs") and v.get("decode_bytes"):
        floor = v["read_gbs"] * 1e9 / v["decode_bytes"]
    # Prefill's share is of the card's float32 FMA peak (its FLOPs over the
    # time against fp32_tflop_per_s), so a tokens/s limit is that peak
    # over the FLOPs a token.
    pf_limit = None
    if v.get("prefill") and v.get("prefill_gflops") and v.get("fp32_tflops"):
        pf_limit = v["prefill"] * v["fp32_tflops"] * 1000 / v["prefill_gflops"]
    rows = [
        ("prefill, 512 tokens (tokens/s; share of the FP32 peak)", "prefill", True, pf_limit),
        ("decode, batch 1 (tokens/s; share of the read bandwidth)", "decode", True, floor),
        ("decode, batch 8, in all (tokens/s)", "decode8", True, floor * 8 if floor else None),
        ("scorer request (ms)", "scorer", False, None),
        ("image through the vision tower (ms)", "image", False, None),
        ("audio clip through the audio tower (ms)", "audio", False, None),
        ("kernels a decode step", "kernels", False, None),
    ]
    print("| figure | verdict | llama.cpp | verdict / llama.cpp | goal | met | verdict's share of its limit |")
    print("|---|---|---|---|---|---|---|")
    for name, key, higher, limit in rows:
        a, b = v.get(key), ll.get(key)
        goal, up = GOALS[key]
        ratio = "-"
        if a is not None and b:
            ratio = "{:.2f}×".format(a / b if higher else b / a)
        met = "-" if a is None else ("yes" if (a >= goal if up else a <= goal) else "no")
        print("| {} | {} | {} | {} | {} {} | {} | {} |".format(
            name, fmt(a), fmt(b), ratio, "≥" if up else "≤", fmt(goal), met, share(a, limit)))
    print()
    if v.get("read_gbs"):
        print("The card's measured read bandwidth: {} GB/s; FP32 peak {} TFLOP/s.".format(
            fmt(v["read_gbs"]), fmt(v.get("fp32_tflops"))))
    if floor:
        print("A decoded token reads {:.2f} GB: the bandwidth bounds decode at {} tokens/s.".format(
            v["decode_bytes"] / 1e9, fmt(floor)))
    cf = chain_floor(os.path.join(out, "chain.txt"))
    if cf and v.get("kernels") and v.get("decode"):
        step = 1e6 / v["decode"]
        print("A kernel of a chain of dependent ones costs {:.2f} µs on this card: the decode step's {} kernels "
              "take at least {:,.0f} µs of its {:,.0f} µs ({:.0f}%).".format(
                  cf, fmt(v["kernels"]), cf * v["kernels"], step, 100 * cf * v["kernels"] / step))
    if v.get("scorer_prefix") is not None:
        print("The scorer request's 512-token prefix: {} ms.".format(fmt(v["scorer_prefix"])))
    if v.get("audio_seconds"):
        print("The audio clip: {} s.".format(fmt(v["audio_seconds"])))
    for n in notes:
        print(n)

    abl = sorted(glob.glob(os.path.join(out, "ablate-*.json")))
    if abl:
        print()
        print("Ablation (the same bench, one switch turned; prefill and decode in tokens/s):")
        print()
        print("| run | prefill | decode, batch 1 | decode, batch 8 | batch 1 against the defaults |")
        print("|---|---|---|---|---|")
        print("| defaults | {} | {} | {} | 1.00 |".format(fmt(v.get("prefill")), fmt(v.get("decode")), fmt(v.get("decode8"))))
        for p in abl:
            sw = os.path.basename(p)[len("ablate-"):-len(".json")]
            a = verdict_figures(load(p), "")
            r = "-"
            if a.get("decode") and v.get("decode"):
                r = "{:.2f}".format(a["decode"] / v["decode"])
            if "=" not in sw:  # a file of an older run: the switch's value was left out
                sw += "=0"
            print("| {} | {} | {} | {} | {} |".format(sw, fmt(a.get("prefill")), fmt(a.get("decode")), fmt(a.get("decode8")), r))

    tabl = sorted(glob.glob(os.path.join(out, "tower-ablate-*.json")))
    if tabl:
        print()
        print("Towers' ablation (the towers alone, one switch turned; ms):")
        print()
        print("| run | an image | the audio clip | image against the defaults | audio against the defaults |")
        print("|---|---|---|---|---|")
        print("| defaults | {} | {} | 1.00 | 1.00 |".format(fmt(v.get("image")), fmt(v.get("audio"))))
        for p in tabl:
            sw = os.path.basename(p)[len("tower-ablate-"):-len(".json")]
            a = verdict_figures(load(p), "")
            ri = "{:.2f}".format(a["image"] / v["image"]) if a.get("image") and v.get("image") else "-"
            ra = "{:.2f}".format(a["audio"] / v["audio"]) if a.get("audio") and v.get("audio") else "-"
            print("| {} | {} | {} | {} | {} |".format(sw, fmt(a.get("image")), fmt(a.get("audio")), ri, ra))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_compare.py OUT")
    main(sys.argv[1])
