#!/usr/bin/env python3
"""scaling_model.py - data-parallel scaling beyond this machine, on paper.

    scaling_model.py [RESULTS_DIR]     (default tests/bench/results)
    scaling_model.py --self-check      (synthetic data; seconds; exit 0/1)

Reads what tests/bench/scaling_model.sh measured (RESULTS_DIR/allreduce.csv,
RESULTS_DIR/compute.csv), fits the alpha-beta (Hockney) model of the ring
allreduce to the 2-host times of each shaped link,

    T_ring(p, n) = 2 (p - 1) alpha + 2 (p - 1) / p * n * beta

(n bytes, alpha seconds per step, beta seconds per byte; the reduction's
own cost, (p - 1) / p * n * gamma, has the same p-dependence as the beta
term and cannot be told apart from it, so it is folded into beta), checks
the fit by predicting the 3-host times, and predicts the scaling
efficiency of 2 .. 1,024 nodes at 10, 25 and 100 Gbit/s:

    efficiency(N) = t_step / (t_step + exposed communication(N))

with t_step one replica's compute per step (weak scaling: the per-replica
batch stays fixed).  Hierarchical allreduce (what
strategy.communication.hierarchical does) is a reduce inside the node, a
ring between the nodes' leaders and a broadcast inside the node; reduce +
broadcast cost one ring allreduce over the node's G ranks with the
intra-node alpha, beta (fitted to the 2-rank hier1 times of one host):

    T_hier(N, G, n) = T_ring(G, n; intra) + T_ring(N, n; inter)

The flat ring runs over all N G ranks, each of its steps paced by its
slowest hop (the inter-node link, or the node's own path where that is
slower).  Exposed communication follows the trainer's fusion
buckets (strategy.communication.bucket_mb, default 25 MB; with overlap at
most a quarter of the gradients; one MPI call per 16 MiB): without
overlap every bucket is reduced after backward; with overlap bucket i may
start once backward has produced its bytes (gradient bytes produced at a
uniform rate over backward), after bucket i-1 has finished, and what runs
past the end of backward is exposed.  Link parameters at rate R: beta =
k * 8 / R, with k (the shaped link's overhead: TCP/IP headers, tbf) the
mean of beta * rate / 8 over the shaped fits without added delay, and
alpha the unshaped fit's (Open MPI over TCP on this machine).  The 1 ms
rows show what a delay does to alpha (and to beta: TCP's window over a
longer round trip).  Writes RESULTS_DIR/scaling_model.txt
(what it prints) and RESULTS_DIR/scaling_efficiency.png.
"""
import csv
import math
import os
import sys

import numpy as np

CHUNK_BYTES = 16 << 20          # one MPI call carries at most 4 Mi floats
BUCKET_BYTES = 25e6             # strategy.communication.bucket_mb default
OVERLAP_BUCKETS = 4             # with overlap: at most 1/4 of the gradients
RANKS_PER_NODE = 4              # Horovod's benchmark: 4 GPUs per server
RATES_GBIT = (10, 25, 100)
NODES = [2 ** i for i in range(1, 11)]   # 2 .. 1,024


# ---- the model ------------------------------------------------------------

def ring_time(p, n, alpha, beta):
    """Seconds for a ring allreduce of n bytes over p ranks."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def fit_alpha_beta(ps, ns, ts):
    """Least squares for alpha, beta in T = a(p) alpha + b(p) n beta,
    each row weighted by 1 / T (relative error: the microsecond times of
    small messages count as much as the second-long ones)."""
    ps, ns, ts = (np.asarray(x, dtype=float) for x in (ps, ns, ts))
    a = np.column_stack([2 * (ps - 1), 2 * (ps - 1) / ps * ns]) / ts[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(ts), rcond=None)
    return max(alpha, 0.0), max(beta, 0.0)


def allreduce_time(n, nodes, g, link, intra, hierarchical):
    """Seconds to allreduce n bytes over nodes x g ranks."""
    calls = max(1, math.ceil(n / CHUNK_BYTES))
    per = n / calls
    if hierarchical:
        t = ring_time(g, per, *intra) + ring_time(nodes, per, *link)
    elif nodes > 1:
        # every step waits for its slowest hop: inter-node, or inside a
        # node where that is slower
        pace = (max(link[0], intra[0]), max(link[1], intra[1])) if g > 1 else link
        t = ring_time(nodes * g, per, *pace)
    else:
        t = ring_time(g, per, *intra)
    return calls * t


def bucket_sizes(total, overlap, bucket_bytes=BUCKET_BYTES):
    cap = bucket_bytes
    if overlap:
        cap = min(cap, total / OVERLAP_BUCKETS)
    k = max(1, math.ceil(total / cap - 1e-9))
    return [total / k] * k


def exposed_comm(total, t_bwd, overlap, tcomm):
    """Seconds of communication not hidden behind backward."""
    bs = bucket_sizes(total, overlap)
    if not overlap:
        return sum(tcomm(b) for b in bs)
    done, produced = 0.0, 0.0
    for b in bs:
        produced += b
        ready = t_bwd * produced / total
        done = max(ready, done) + tcomm(b)
    return max(0.0, done - t_bwd)


def efficiency(m, nodes, g, link, intra, hierarchical, overlap):
    t_step = m["fwd"] + m["bwd"] + m["opt"]
    tc = lambda b: allreduce_time(b, nodes, g, link, intra, hierarchical)
    return t_step / (t_step + exposed_comm(m["bytes"], m["bwd"], overlap, tc))


# ---- the workloads --------------------------------------------------------

def cnn_flops_per_image():
    """Training FLOPs (forward + 2x for backward) of
    graphs/fashion_mnist_cnn.yaml, one 28x28x1 image."""
    macs = (28 * 28 * 32 * 5 * 5 * 1        # conv 5x5x32, same
            + 14 * 14 * 64 * 5 * 5 * 32     # conv 5x5x64 after the pool
            + 7 * 7 * 64 * 1024             # dense 1024
            + 1024 * 10)                    # dense 10
    return 3 * 2 * macs


def gpt_shapes(layers=4, heads=4, channels=128, block=64, vocab=90, bias=True):
    """nanoGPT's char model: token and position embeddings (the token
    table tied to the output layer), per block ln_1, attention (c_attn
    C x 3C, c_proj C x C), ln_2, MLP (C x 4C, 4C x C), then ln_f.
    Returns (parameters, training FLOPs per token)."""
    c = channels
    per_block = 12 * c * c + (9 * c if bias else 0) + 2 * (2 * c if bias else c)
    params = vocab * c + block * c + layers * per_block + (2 * c if bias else c)
    # 6 FLOPs per weight per token (forward 2, backward 4) over the matmul
    # weights (blocks and the tied output layer), plus attention's
    # QK^T and AV: 2 * 2 * block * C per layer forward, x3 with backward
    flops = 6 * (layers * 12 * c * c + vocab * c) + 3 * 4 * layers * block * c
    return params, flops


def workloads(compute):
    cnn_batch = compute["batch"]
    fwd, bwd, opt = compute["fwd"], compute["bwd"], compute["opt"]
    rate = cnn_flops_per_image() * cnn_batch / (fwd + bwd)    # FLOP/s
    gpt_params, gpt_flops_tok = gpt_shapes()
    gpt_tokens = 64 * 64                  # batch 64 sequences of 64 tokens
    gpt_t = gpt_flops_tok * gpt_tokens / rate
    rn_t = 3 * 2 * 4.1e9 * 32 / rate      # ResNet-50: 4.1 GMAC / image, batch 32
    out = [
        dict(name="Fashion-MNIST CNN", params=3274634, fwd=fwd, bwd=bwd, opt=opt,
             how=f"measured: batch {cnn_batch}, 1 thread"),
        dict(name="GPT (nanoGPT char)", params=gpt_params, fwd=gpt_t / 3,
             bwd=2 * gpt_t / 3, opt=opt * gpt_params / 3274634,
             how=f"{gpt_flops_tok * gpt_tokens / 1e9:.1f} GFLOP/step at the CNN's {rate / 1e9:.1f} GFLOP/s"),
        dict(name="25M gradient (ResNet-50)", params=25_000_000, fwd=rn_t / 3,
             bwd=2 * rn_t / 3, opt=opt * 25e6 / 3274634,
             how=f"{3 * 2 * 4.1e9 * 32 / 1e9:.0f} GFLOP/step (batch 32) at {rate / 1e9:.1f} GFLOP/s"),
        # Horovod's benchmark: 1656.82 images/s on 16 Pascal GPUs at batch
        # 64 per GPU (its docs' example output): 0.62 s per step per GPU
        dict(name="Horovod setup (ResNet-101)", params=44_500_000,
             fwd=0.618 / 3, bwd=2 * 0.618 / 3, opt=0.0,
             how="44.5M gradient, 0.62 s/step (64 images at 1656.82/16 images/s per GPU)"),
    ]
    for m in out:
        m["bytes"] = 4.0 * m["params"]
        m["gpt_params"] = gpt_params
    return out, rate


# ---- the measurements -----------------------------------------------------

def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rate_bits(rate):
    """tbf rate ('1gbit', '300mbit') -> bit/s; 'off' -> None."""
    if rate == "off":
        return None
    for unit, mul in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * mul
    raise ValueError(f"unknown rate {rate!r}")


def best_times(rows):
    """{(hosts, rate, delay, path, bytes): (min seconds, max/min - 1)}
    over the rounds."""
    acc = {}
    for r in rows:
        key = (int(r["hosts"]), r["rate"], int(r["delay_us"]), r["path"], int(r["bytes"]))
        acc.setdefault(key, []).append(float(r["seconds"]))
    return {k: (min(v), max(v) / min(v) - 1) for k, v in acc.items()}


def analyse(results, emit):
    for f in ("allreduce.csv", "compute.csv"):
        if not os.path.isfile(os.path.join(results, f)):
            sys.exit(f"scaling_model.py: {results}/{f} is missing (tests/bench/scaling_model.sh writes it)")
    rows = read_csv(os.path.join(results, "allreduce.csv"))
    crow = read_csv(os.path.join(results, "compute.csv"))
    if not rows or not crow:
        sys.exit(f"scaling_model.py: no rows in {results}/allreduce.csv or compute.csv")
    best = best_times(rows)
    rounds = len({r["round"] for r in rows})
    emit(f"# allreduce: best of {rounds} rounds (spread: max/min - 1 over the rounds,"
         " median over the sizes >= 512 KiB of 2 and 3 hosts)")
    conds = sorted({(k[1], k[2]) for k in best if k[0] > 1},
                   key=lambda c: (rate_bits(c[0]) or 1e99, c[1]))
    fits = {}
    for path, what in (("ring", "Open MPI's ring forced"), ("flat", "Open MPI's own choice")):
        emit(f"# {path}: MPI_Allreduce, {what}; fit to 2 hosts, checked on 3")
        emit(f"{'link':>22} {'alpha us':>9} {'beta ns/B':>10} {'GB/s':>6}"
             f" {'k':>5} {'3-host err (all / >=512K)':>26} {'spread':>7}")
        for rate, delay in conds:
            two = [(k[4], v[0]) for k, v in best.items() if k[:4] == (2, rate, delay, path)]
            three = [(k[4], v[0]) for k, v in best.items() if k[:4] == (3, rate, delay, path)]
            if len(two) < 2 or not three:
                continue
            spread = float(np.median([v[1] for k, v in best.items()
                                      if k[1:4] == (rate, delay, path) and k[4] >= 524288]))
            n2, t2 = zip(*sorted(two))
            alpha, beta = fit_alpha_beta([2] * len(n2), n2, t2)
            bits = rate_bits(rate)
            k = beta * bits / 8 if bits else float("nan")
            n3, t3 = zip(*sorted(three))
            pred = np.array([ring_time(3, n, alpha, beta) for n in n3])
            e = pred / np.array(t3) - 1
            big = [abs(x) for n, x in zip(n3, e) if n >= 524288]
            fits[(path, rate, delay)] = dict(alpha=alpha, beta=beta, k=k, err=e, n3=n3,
                                             t3=t3, pred=pred)
            emit(f"{'tbf ' + rate + ', +' + str(delay) + ' us':>22} {alpha * 1e6:9.1f}"
                 f" {beta * 1e9:10.3f} {1 / beta / 1e9 if beta else float('inf'):6.3f}"
                 f" {k:5.2f} {100 * float(np.median(np.abs(e))):11.1f}% /"
                 f" {100 * float(np.median(big)) if big else float('nan'):5.1f}%      {100 * spread:6.1f}%")
        errs = [np.abs(f["err"]) for (p, _, _), f in fits.items() if p == path]
        if errs:
            errs = np.concatenate(errs)
            emit(f"#   3-host prediction from 2-host fits ({path}): median |error|"
                 f" {100 * np.median(errs):.1f}%, max {100 * errs.max():.1f}% over {len(errs)} (link, size) cells")
    for (path, rate, delay), f in fits.items():
        emit(f"#   {path}, 3 hosts, tbf {rate} +{delay} us, measured / predicted ms: " +
             "  ".join(f"{n}:{t * 1e3:.2f}/{p * 1e3:.2f}" for n, t, p in zip(f["n3"], f["t3"], f["pred"])))
    intra_rows = [(k[4], v[0]) for k, v in best.items() if k[0] == 1 and k[3] == "hier1"]
    n1, t1 = zip(*sorted(intra_rows))
    intra = fit_alpha_beta([2] * len(n1), n1, t1)
    emit(f"# intra-node (2 ranks, hier1: MPI reduce + broadcast): alpha {intra[0] * 1e6:.1f} us,"
         f" beta {intra[1] * 1e9:.3f} ns/B ({1 / intra[1] / 1e9:.2f} GB/s)")
    base = fits.get(("ring", "off", 0))
    shaped = [f["k"] for (p, r, d), f in fits.items()
              if p == "ring" and r != "off" and d == 0 and math.isfinite(f["k"])]
    if not base or not shaped:
        sys.exit("scaling_model.py: need the unshaped and at least one shaped ring fit (no delay)")
    k = float(np.mean(shaped))
    alpha0 = base["alpha"]
    emit(f"# extrapolated links: alpha {alpha0 * 1e6:.1f} us (unshaped ring fit), beta = {k:.2f} x 8 / rate"
         f" (k: mean over the {len(shaped)} shaped ring fits without delay); this machine's unshaped"
         f" TCP path: {1 / base['beta'] / 1e9:.2f} GB/s")

    compute = dict(batch=int(crow[0]["batch"]),
                   **{p: float(np.median([float(r[p + "_ms"]) for r in crow])) / 1e3
                      for p in ("fwd", "bwd", "opt")})
    spread_c = max(float(r["fwd_ms"]) + float(r["bwd_ms"]) for r in crow) / \
        min(float(r["fwd_ms"]) + float(r["bwd_ms"]) for r in crow) - 1
    models, rate = workloads(compute)
    emit(f"# compute per step (median of {len(crow)} runs, fwd+bwd spread {100 * spread_c:.0f}%):")
    for m in models:
        emit(f"#   {m['name']:<28} {m['params']:>11,} params ({m['bytes'] / 1e6:6.1f} MB)"
             f"  fwd {m['fwd'] * 1e3:8.1f}  bwd {m['bwd'] * 1e3:8.1f}  opt {m['opt'] * 1e3:6.1f} ms  ({m['how']})")
    emit(f"# predicted scaling efficiency, {RANKS_PER_NODE} ranks per node (nodes x {RANKS_PER_NODE} replicas);"
         f" ring: flat over all ranks, hier: reduce in node + ring of nodes + broadcast")
    slow = [g for g in RATES_GBIT if intra[1] > k * 8 / (g * 1e9)]
    if slow:
        emit(f"#   the intra-node path measured here ({1 / intra[1] / 1e9:.2f} GB/s) is slower than a"
             f" {', '.join(map(str, slow))} Gbit/s link: there the flat ring is paced by it")
    show = [2, 8, 32, 128, 512, 1024]
    table = {}
    for m in models:
        emit(f"## {m['name']}")
        emit(f"{'':>22}" + "".join(f"{n:>7}" for n in show) + "  nodes")
        for gbit in RATES_GBIT:
            link = (alpha0, k * 8 / (gbit * 1e9))
            for hier in (False, True):
                for ovl in (True, False):
                    effs = [efficiency(m, n, RANKS_PER_NODE, link, intra, hier, ovl) for n in NODES]
                    table[(m["name"], gbit, hier, ovl)] = effs
                    label = f"{gbit:>3} Gbit {'hier' if hier else 'ring'} ovl {'on ' if ovl else 'off'}"
                    emit(f"{label:>22}" + "".join(f"{100 * effs[NODES.index(n)]:6.1f}%" for n in show))
    hv = table[("Horovod setup (ResNet-101)", 25, True, True)][NODES.index(128)]
    hr = table[("Horovod setup (ResNet-101)", 25, False, True)][NODES.index(128)]
    emit(f"# Horovod's benchmark: 90% at 512 GPUs (128 servers x 4, ResNet-101, 25 Gbit/s RoCE);"
         f" this model at 128 nodes x 4, 25 Gbit/s, overlap on: {100 * hr:.1f}% ring,"
         f" {100 * hv:.1f}% hierarchical")
    # how low would the per-step latency have to be for Horovod's 90%?
    hm = next(m for m in models if m["name"].startswith("Horovod"))
    lo, hi = 0.0, alpha0
    link_at = lambda a: (a, k * 8 / 25e9)
    if efficiency(hm, 128, RANKS_PER_NODE, link_at(0.0), intra, True, True) >= 0.9:
        for _ in range(50):
            mid = (lo + hi) / 2
            if efficiency(hm, 128, RANKS_PER_NODE, link_at(mid), intra, True, True) >= 0.9:
                lo = mid
            else:
                hi = mid
        emit(f"#   hierarchical reaches 90% there with alpha <= {lo * 1e6:.1f} us per step"
             f" (TCP here: {alpha0 * 1e6:.1f} us)")
    else:
        emit("#   hierarchical stays under 90% there even with alpha 0 (bandwidth-bound)")
    return table, models


def plot(table, models, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True, sharey=True)
    colors = {10: "tab:red", 25: "tab:blue", 100: "tab:green"}
    for ax, m in zip(axes.flat, models):
        for gbit in RATES_GBIT:
            for hier, ls in ((False, "-"), (True, "--")):
                for ovl, lw, a in ((True, 2.0, 1.0), (False, 1.0, 0.45)):
                    e = table[(m["name"], gbit, hier, ovl)]
                    ax.plot(NODES, [100 * x for x in e], ls, color=colors[gbit], lw=lw, alpha=a,
                            label=f"{gbit} Gbit/s {'hier' if hier else 'ring'}"
                                  f"{'' if ovl else ', no overlap'}")
        if m["name"].startswith("Horovod"):
            ax.plot([128], [90], "k*", ms=12, label="Horovod: 90% at 512 GPUs")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{m['name']}, {m['bytes'] / 1e6:.1f} MB gradient", fontsize=10)
        ax.set_ylim(0, 101)
        ax.grid(True, alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(f"nodes ({RANKS_PER_NODE} replicas each)")
    for ax in axes[:, 0]:
        ax.set_ylabel("scaling efficiency %")
    axes[0, 0].legend(fontsize=6.5, ncol=2, loc="lower left")
    axes[1, 1].legend(fontsize=6.5, ncol=2, loc="lower left")
    fig.suptitle("Predicted weak-scaling efficiency (alpha-beta fit to namespace-host allreduce);\n"
                 "a flat ring is paced by its slowest hop: where that is this machine's intra-node"
                 " path, the rates' ring lines coincide", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ---- self-check -----------------------------------------------------------

def self_check():
    """Synthetic times from known alpha, beta (with 2% noise) must give them
    back, and predict the 3-rank times; the bucket schedule must agree with
    its closed forms."""
    rng = np.random.default_rng(7)
    ok = True
    sizes = [4, 4096, 65536, 524288, 2097152, 8388608]
    for alpha, beta in ((50e-6, 8e-9), (1.2e-3, 27e-9), (20e-6, 0.4e-9)):
        t2 = [ring_time(2, n, alpha, beta) * (1 + 0.02 * rng.standard_normal()) for n in sizes]
        a, b = fit_alpha_beta([2] * len(sizes), sizes, t2)
        pred = [ring_time(3, n, a, b) for n in sizes]
        true = [ring_time(3, n, alpha, beta) for n in sizes]
        worst = max(abs(p / t - 1) for p, t in zip(pred, true))
        good = abs(a / alpha - 1) < 0.05 and abs(b / beta - 1) < 0.05 and worst < 0.05
        print(f"{'ok' if good else 'FAIL'}: alpha {alpha:.3g} -> {a:.3g}, beta {beta:.3g} -> {b:.3g},"
              f" 3-rank prediction within {100 * worst:.1f}%")
        ok &= good
    # the fit must tell alpha from beta: only 3 ranks' data, no noise, exact
    a, b = fit_alpha_beta([3] * 3, [8, 80000, 8e6], [ring_time(3, n, 1e-4, 1e-9) for n in (8, 80000, 8e6)])
    good = abs(a - 1e-4) < 1e-9 and abs(b - 1e-9) < 1e-15
    print(f"{'ok' if good else 'FAIL'}: exact 3-rank times give alpha {a:.6g}, beta {b:.6g} (1e-4, 1e-9)")
    ok &= good
    # buckets: without overlap all of it is exposed; with overlap and a
    # long backward only the last bucket; with a zero-time backward all
    tc = lambda n: 1e-3 + n * 1e-9
    total = 13.1e6
    no = exposed_comm(total, 1.0, False, tc)
    last = exposed_comm(total, 10.0, True, tc)
    zero = exposed_comm(total, 0.0, True, tc)
    want_no, want_last = tc(total), tc(total / 4)
    want_zero = 4 * tc(total / 4)
    good = (abs(no - want_no) < 1e-12 and abs(last - want_last) < 1e-12
            and abs(zero - want_zero) < 1e-12)
    print(f"{'ok' if good else 'FAIL'}: exposed comm {no:.6f}/{last:.6f}/{zero:.6f} s,"
          f" closed forms {want_no:.6f}/{want_last:.6f}/{want_zero:.6f}")
    ok &= good
    # nanoGPT char model, bias=False: 4 x (12 C^2 + 2 C) + (V + T) C + C
    p, _ = gpt_shapes(bias=False)
    good = p == 4 * (12 * 128 ** 2 + 2 * 128) + (90 + 64) * 128 + 128 and p == 807296
    print(f"{'ok' if good else 'FAIL'}: GPT parameters without biases {p}")
    ok &= good
    # efficiency falls with nodes and rises with link rate
    m = dict(bytes=4 * 3.27e6, fwd=0.01, bwd=0.02, opt=0.002)
    e10 = [efficiency(m, n, 4, (50e-6, 8 / 10e9), (5e-6, 0.2e-9), False, True) for n in NODES]
    e100 = [efficiency(m, n, 4, (50e-6, 8 / 100e9), (5e-6, 0.2e-9), False, True) for n in NODES]
    good = all(x >= y for x, y in zip(e10, e10[1:])) and all(y >= x for x, y in zip(e10, e100))
    print(f"{'ok' if good else 'FAIL'}: efficiency falls with nodes, rises with rate")
    ok &= good
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-check"]:
        return self_check()
    results = argv[1] if len(argv) > 1 else "tests/bench/results"
    lines = []

    def emit(s):
        print(s)
        lines.append(s)

    table, models = analyse(results, emit)
    with open(os.path.join(results, "scaling_model.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    png = os.path.join(results, "scaling_efficiency.png")
    plot(table, models, png)
    print(f"# wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
