# Peer for `verdict bench serve`: transformers scoring the same records'
# token rows (`verdict bench serve --dump-rows ROWS`) on the same card, as
# fast as it can, with random weights of the E2B shape (speed does not
# depend on their values). Two ways, each at several batch sizes:
#   padded: every candidate row as one sequence (the record's prefix and
#           the row), left-padded, B records' rows a batch, logits kept only
#           for the rows' own positions (logits_to_keep);
#   prefix: a record's prefix once with its key/value cache, then all its
#           candidate rows in one padded batch over copies of that cache.
# Prints one JSON line per measurement and a RESULT line with the best.
# Env: ROWS (the dump), N (records, default 256), PREFIX_N (records of the
# prefix way, 64), BATCHES (records a padded batch, 4,16,32), DT (bf16|f32),
# ATTN (sdpa).
import os, time, json, copy
import torch
from transformers import Gemma3nTextConfig, Gemma3nForCausalLM

torch.set_grad_enabled(False)
dev = "cuda"
dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[os.environ.get("DT", "bf16")]
n = 30
lt = [("full_attention" if (i + 1) % 5 == 0 else "sliding_attention") for i in range(n)]
cfg = Gemma3nTextConfig(num_hidden_layers=n, intermediate_size=[8192] * n, num_kv_shared_layers=10, layer_types=lt,
                        activation_sparsity_pattern=[0.95] * 10 + [0.0] * 20)
cfg._attn_implementation = os.environ.get("ATTN", "sdpa")
with torch.device(dev):
    torch.manual_seed(0)
    m = Gemma3nForCausalLM(cfg).to(dtype).eval()

N = int(os.environ.get("N", 256))
recs = []
with open(os.environ["ROWS"]) as f:
    for line in f:
        d = json.loads(line)
        recs.append((d["prefix"], [c for dec in d["rows"] for c in dec]))
        if len(recs) == N:
            break


def sync():
    torch.cuda.synchronize()


def padded(batch):
    seqs = [(p + r, len(r)) for p, rows in batch for r in rows]
    L = max(len(s) for s, _ in seqs)
    K = max(k for _, k in seqs)
    ids = torch.zeros((len(seqs), L), dtype=torch.long)
    am = torch.zeros_like(ids)
    for i, (s, _) in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s)
        am[i, L - len(s):] = 1
    ids, am = ids.to(dev), am.to(dev)
    pos = (am.cumsum(-1) - 1).clamp(min=0)
    lg = m(input_ids=ids, attention_mask=am, position_ids=pos, logits_to_keep=K + 1).logits
    lp = torch.log_softmax(lg[:, :-1].float(), -1)
    tgt = ids[:, L - K:]
    return lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)


def prefix(rec):
    p, rows = rec
    out = m(input_ids=torch.tensor([p], device=dev), use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(rows))
    L = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), L), dtype=torch.long)
    am = torch.ones((len(rows), len(p) + L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        am[i, len(p) + len(r):] = 0
    lg = m(input_ids=ids.to(dev), attention_mask=am.to(dev), past_key_values=cache, use_cache=True).logits
    return torch.log_softmax(lg.float(), -1).shape


res = {"records": len(recs), "rows_per_record": len(recs[0][1]), "prefix_tokens": len(recs[0][0]), "dtype": str(dtype),
       "attn": cfg._attn_implementation}
best = ("", 0.0)


def measure(name, fn, groups):
    global best
    try:
        fn(groups[0])  # warm
        sync()
        t0 = time.perf_counter()
        done = 0
        for g in groups:
            fn(g)
            done += len(g) if isinstance(g, list) else 1
        sync()
        rate = done / (time.perf_counter() - t0)
        res[name] = round(rate, 2)
        if rate > best[1]:
            best = (name, rate)
    except Exception as e:  # out of memory at a large batch, ...
        res[name] = "error: " + repr(e)[:200]
        torch.cuda.empty_cache()
    print(json.dumps(res), flush=True)


measure("prefix_records_per_s", prefix, recs[:min(len(recs), int(os.environ.get("PREFIX_N", 64)))])
for B in [int(b) for b in os.environ.get("BATCHES", "4,16,32").split(",")]:
    measure(f"padded_b{B}_records_per_s", padded, [recs[i:i + B] for i in range(0, len(recs), B)])
res["best"], res["best_records_per_s"] = best[0], round(best[1], 2)
print("RESULT " + json.dumps(res), flush=True)
