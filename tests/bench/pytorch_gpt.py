#!/usr/bin/env python3
"""pytorch_gpt.py - the PyTorch peer of dtf-train for tests/bench/gpt_vs_pytorch.sh.

Trains the character-level GPT of graphs/shakespeare_char_gpt.yaml with
PyTorch: nanoGPT's pre-norm GPT-2 block, h = wte[x] + wpe[0:T]; per block
h += proj(causal_attention(qkv(layer_norm(h)))), h += mlp_proj(gelu_tanh(
fc(layer_norm(h)))); logits = layer_norm(h) @ wte^T (tied; --untied adds
an lm_head); loss = mean over B*T tokens of the softmax cross-entropy.
Layer-norm epsilon 1e-5, no dropout.  Initialisation as nanoGPT: every
kernel and embedding ~ N(0, 0.02), the two residual projections (attention
and MLP output) ~ N(0, 0.02 / sqrt(2 * layers)), biases 0, layer-norm gamma
1 and beta 0.  AdamW (beta1 0.9, beta2 0.99, eps 1e-8, torch.optim.AdamW)
with decoupled weight decay 0.1 on the tensors of rank >= 2 only (kernels
and embeddings); learning rate 1e-3, linear warm-up from 0 over 100 steps
then cosine decay to 1e-4 at the last step (dtf-train's cosine_decay with
alpha 0.1: lr(s) = lr * s / w for s < w, else lr * (0.9 * 0.5 * (1 + cos(pi
* (s - w) / (N - w))) + 0.1)); gradients clipped to global norm 1.0.
(dtf-train's Adam adds epsilon to sqrt(v) before the bias correction, as
Keras, PyTorch after it; at eps 1e-8 that is far below float32 noise.)

Data: the same TFRecord files dtf-train reads (dtf-records convert-text:
datasets/shakespeare/block64/ for the 4-layer job, windows of T+1 = 65
ids; datasets/shakespeare/ for --config 6l, windows of 257), parsed here in
plain Python: each record is length (u64 little-endian), masked CRC-32C of
the length (u32), the data, masked CRC-32C of the data (u32), the data a
serialized tf.train.Example whose features map holds `tokens`, a
bytes_list of one value of T+1 uint8 ids.  The CRCs are not verified
(dtf-train checks them; a pure-Python CRC-32C would dominate start-up);
framing, lengths and the protobuf structure are, and every window must
have the same length.  The vocabulary size is the size of vocab.txt (one
byte per id).  All windows are read into memory once as uint8; inputs are
ids 0..T-1 of a window, labels ids 1..T.  Each epoch the training windows
are visited in a fresh random order (seeded); dtf-train shuffles through a
buffer instead, which changes which windows share a batch, not the model.

One process:           python3 pytorch_gpt.py --threads 2 ...
DistributedDataParallel (gloo), one process per rank, launched like
dtf-train:             mpirun -np 2 python3 pytorch_gpt.py --threads 1 ...
(rank and world size come from Open MPI's environment; rendezvous on
127.0.0.1:$MASTER_PORT).  --batch is the GLOBAL batch, split over ranks.

Evaluation (--eval, after the last step): the mean token cross-entropy
over the whole validation split, each rank taking every world-th batch of
--batch/world windows, the sums allreduced.  That is dtf-train's eval
loss: it sums each example's loss over its batches, allreduces and divides
by the number of examples; every window has T targets, so the mean of the
per-example mean token loss is the mean over all tokens.

Prints, from rank 0, lines the benchmark script parses:
  RESULT tokens_per_s=X samples_per_s=Y steps=N warmup=W   after warm-up
  EVAL step=S loss=L examples=E tokens=K seconds=T          with --eval
  CPU rank=R user_s=U sys_s=S timed_s=C                     every rank;
      timed_s: user+sys of the process over the timed steps only
  RSS rank=R peak_mb=M import_mb=I     every rank, ru_maxrss (I: right after import torch)
and "step S/N loss L lr X" every --log-every steps (the mean training loss
of rank 0's share of those steps).
"""
import argparse
import math
import os
import resource
import struct
import sys
import time

T_START = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# the resident memory of the interpreter and the torch libraries alone
IMPORT_MB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

CONFIGS = {
    # layers, heads, embedding width, block size, default data directory
    "4l": (4, 4, 128, 64, "datasets/shakespeare/block64"),
    "6l": (6, 6, 384, 256, "datasets/shakespeare"),
}


def die(msg):
    sys.exit("pytorch_gpt.py: " + msg)


# ---- TFRecord and tf.train.Example, in plain Python ------------------------

def varint(buf, pos, end):
    v = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7


def fields(buf, pos, end):
    """[(field number, wire type, value or (start, stop) of its bytes)] of a message."""
    out = []
    while pos < end:
        b = buf[pos]
        if b < 0x80:
            key, pos = b, pos + 1
        else:
            key, pos = varint(buf, pos, end)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = varint(buf, pos, end)
        elif wire == 2:
            b = buf[pos] if pos < end else 0x80
            if b < 0x80:
                n, pos = b, pos + 1
            else:
                n, pos = varint(buf, pos, end)
            v = (pos, pos + n)
            pos += n
        elif wire == 1 or wire == 5:
            v = None
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError("wire type %d" % wire)
        if pos > end:
            raise ValueError("field past the end of its message")
        out.append((num, wire, v))
    return out


def example_bytes_feature(buf, start, end, name):
    """The single value of bytes_list feature `name` of a tf.train.Example:
    Example.features (1) -> Features.feature (1, map entries: key 1, value
    2) -> Feature.bytes_list (1) -> BytesList.value (1)."""
    for num, wire, v in fields(buf, start, end):
        if num != 1 or wire != 2:
            continue
        for num2, wire2, v2 in fields(buf, *v):
            if num2 != 1 or wire2 != 2:
                continue
            key = val = None
            for num3, wire3, v3 in fields(buf, *v2):
                if num3 == 1 and wire3 == 2:
                    key = buf[v3[0]:v3[1]]
                elif num3 == 2 and wire3 == 2:
                    val = v3
            if key != name or val is None:
                continue
            for num4, wire4, v4 in fields(buf, *val):
                if num4 != 1 or wire4 != 2:
                    raise ValueError("feature %r is not a bytes_list" % name.decode())
                values = [v5 for n5, w5, v5 in fields(buf, *v4) if n5 == 1 and w5 == 2]
                if len(values) != 1:
                    raise ValueError("feature %r has %d values, not 1" % (name.decode(), len(values)))
                return buf[values[0][0]:values[0][1]]
            raise ValueError("feature %r is empty" % name.decode())
    raise ValueError("no feature %r" % name.decode())


def read_windows(paths):
    """uint8 array (records, T+1) of the `tokens` of every record of paths."""
    rows, width = [], None
    for path in paths:
        with open(path, "rb") as f:
            buf = f.read()
        pos, n = 0, len(buf)
        while pos < n:
            if pos + 12 > n:
                die("%s: truncated record header at byte %d" % (path, pos))
            length, = struct.unpack_from("<Q", buf, pos)
            start = pos + 12
            if start + length + 4 > n:
                die("%s: record at byte %d runs past the end of the file" % (path, pos))
            try:
                tok = example_bytes_feature(buf, start, start + length, b"tokens")
            except ValueError as e:
                die("%s: record at byte %d: %s" % (path, pos, e))
            if width is None:
                width = len(tok)
            elif len(tok) != width:
                die("%s: record at byte %d has %d tokens, the first had %d"
                    % (path, pos, len(tok), width))
            rows.append(bytes(tok))
            pos = start + length + 4
    if not rows:
        die("no records in %s" % " ".join(paths))
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), width)


def load_split(data_dir, prefix):
    names = sorted(n for n in os.listdir(data_dir)
                   if n.startswith(prefix + "-") and n.endswith(".tfrecord"))
    if not names:
        die("%s: no %s-*.tfrecord files" % (data_dir, prefix))
    return torch.from_numpy(read_windows([os.path.join(data_dir, n) for n in names]).copy())


# ---- the model -------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.qkv = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, h):
        b, t, c = h.shape
        q, k, v = self.qkv(self.ln_1(h)).split(c, dim=2)
        # head j = columns j*D .. (j+1)*D-1 of q, k and v (nanoGPT's view)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(D)
        h = h + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return h + self.mlp_proj(F.gelu(self.fc(self.ln_2(h)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, c, tied=True):
        super().__init__()
        if c % heads:
            die("embedding width %d is not divisible by %d heads" % (c, heads))
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)
        self.lm_head = None if tied else nn.Linear(c, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02
                if name.endswith("attn_proj.weight") or name.endswith("mlp_proj.weight"):
                    std = 0.02 / math.sqrt(2 * layers)
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, x, y):
        t = x.shape[1]
        h = self.wte(x) + self.wpe.weight[:t]
        for blk in self.h:
            h = blk(h)
        h = self.ln_f(h)
        logits = h @ self.wte.weight.t() if self.lm_head is None else self.lm_head(h)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1),
                               reduction="sum") / y.numel()


def learning_rate(s, a):
    """dtf-train's cosine_decay with a linear warm-up (src/train/schedule.c)."""
    w = a.lr_warmup
    if w > 0 and s < w:
        return a.lr * s / w
    d = max(a.steps - w, 1)
    t = min(s - w, d)
    alpha = a.min_lr / a.lr
    return a.lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t / d)) + alpha)


def batch(windows, idx):
    w = windows[idx].to(torch.int64)
    return w[:, :-1], w[:, 1:]


def evaluate(model, val, per, rank, world):
    """Mean token cross-entropy over every validation window, all ranks
    (the mean does not depend on the batch: --eval-batch per rank)."""
    model.eval()
    tot = torch.zeros(3, dtype=torch.float64)  # loss sum, examples, tokens
    with torch.no_grad():
        for i in range(rank * per, val.shape[0], world * per):
            x, y = batch(val, slice(i, i + per))
            tot[0] += float(model(x, y)) * y.numel()
            tot[1] += y.shape[0]
            tot[2] += y.numel()
    model.train()
    if world > 1:
        dist.all_reduce(tot)
    return float(tot[0] / tot[2]), int(tot[1]), int(tot[2])


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="4l",
                    help="4l: graphs/shakespeare_char_gpt.yaml; 6l: graphs/shakespeare_char_gpt_6l.yaml")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--embd", type=int, help="embedding width C")
    ap.add_argument("--untied", action="store_true", help="an lm_head instead of wte^T")
    ap.add_argument("--data-dir", help="directory of train-*.tfrecord, validation-*.tfrecord, vocab.txt")
    ap.add_argument("--batch", type=int, default=12, help="global batch (windows per step)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000, help="training steps (the schedule's length)")
    ap.add_argument("--warmup", type=int, default=20, help="steps before the throughput timing starts")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--lr-warmup", type=int, default=100, help="learning-rate warm-up steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clipnorm", type=float, default=1.0)
    ap.add_argument("--eval", action="store_true", help="validation loss after the last step")
    ap.add_argument("--eval-batch", type=int, default=64, help="windows per rank per eval batch")
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    layers, heads, embd, a.block, data = CONFIGS[a.config]
    a.layers = a.layers or layers
    a.heads = a.heads or heads
    a.embd = a.embd or embd
    if a.data_dir is None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        a.data_dir = os.path.join(root, data)
    if a.steps < 1 or a.batch < 1 or a.threads < 1 or a.warmup < 0:
        die("--steps, --batch and --threads must be positive, --warmup not negative")
    return a


def main():
    a = parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.batch % world:
        die("--batch %d is not divisible by %d ranks" % (a.batch, world))
    per = a.batch // world

    vocab_path = os.path.join(a.data_dir, "vocab.txt")
    try:
        vocab = os.path.getsize(vocab_path)
    except OSError as e:
        die("%s: %s (make it with datasets/prepare.sh)" % (vocab_path, e.strerror))
    train = load_split(a.data_dir, "train")
    val = load_split(a.data_dir, "validation") if a.eval else None
    if train.shape[1] - 1 != a.block:
        die("%s: windows of %d ids, the %s config needs %d (block %d + 1)"
            % (a.data_dir, train.shape[1], a.config, a.block + 1, a.block))
    if int(train.max()) >= vocab:
        die("%s: id %d is past the %d-character vocabulary" % (a.data_dir, int(train.max()), vocab))

    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29518")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model = GPT(vocab, a.block, a.layers, a.heads, a.embd, tied=not a.untied)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.99), eps=1e-8)
    params = list(model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    if rank == 0:
        n = sum(p.numel() for p in params)
        print("pytorch %s: %d rank(s) x %d thread(s), %d layers, %d heads, C %d, T %d, vocab %d, "
              "%d parameters, global batch %d, %d steps, %d training windows"
              % (torch.__version__, world, a.threads, a.layers, a.heads, a.embd, a.block, vocab,
                 n, a.batch, a.steps, train.shape[0]), flush=True)

    steps_per_epoch = train.shape[0] // a.batch
    step, t_warm, cpu_warm, loss_sum, loss_n = 0, None, None, 0.0, 0
    g = torch.Generator().manual_seed(a.seed)
    while step < a.steps:
        perm = torch.randperm(train.shape[0], generator=g)
        for s in range(steps_per_epoch):
            if step >= a.steps:
                break
            lr = learning_rate(step, a)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = batch(train, perm[s * a.batch + rank * per: s * a.batch + (rank + 1) * per])
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clipnorm > 0:
                torch.nn.utils.clip_grad_norm_(params, a.clipnorm)
            opt.step()
            step += 1
            if a.log_every:
                loss_sum += float(loss.detach())
                loss_n += 1
                if step % a.log_every == 0 and rank == 0:
                    print("step %d/%d loss %.4f lr %.3g" % (step, a.steps, loss_sum / loss_n, lr),
                          flush=True)
                if step % a.log_every == 0:
                    loss_sum, loss_n = 0.0, 0
            if step == a.warmup:
                t_warm, cpu_warm = time.time(), cpu_seconds()
    t_end, cpu_end = time.time(), cpu_seconds()
    if step > a.warmup:
        if t_warm is None:  # --warmup 0
            t_warm, cpu_warm = T_START, (0.0, 0.0)
        sps = (step - a.warmup) * a.batch / (t_end - t_warm)
        if rank == 0:
            print("RESULT tokens_per_s=%.1f samples_per_s=%.2f steps=%d warmup=%d"
                  % (sps * a.block, sps, step, a.warmup), flush=True)
    if a.eval:
        te = time.time()
        vloss, ex, tok = evaluate(model.module if world > 1 else model, val, a.eval_batch,
                                  rank, world)
        if rank == 0:
            print("EVAL step=%d loss=%.4f examples=%d tokens=%d seconds=%.1f"
                  % (step, vloss, ex, tok, time.time() - te), flush=True)
    ut, st = cpu_seconds()
    timed = (cpu_end[0] + cpu_end[1]) - (cpu_warm[0] + cpu_warm[1]) if cpu_warm else 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    # every rank reports; print in rank order
    for r in range(world):
        if world > 1:
            dist.barrier()
        if r == rank:
            print("CPU rank=%d user_s=%.2f sys_s=%.2f timed_s=%.2f" % (rank, ut, st, timed), flush=True)
            print("RSS rank=%d peak_mb=%.1f import_mb=%.1f" % (rank, rss, IMPORT_MB), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
