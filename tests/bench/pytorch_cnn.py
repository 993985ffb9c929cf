#!/usr/bin/env python3
"""pytorch_cnn.py - the PyTorch peer of dtf-train for tests/bench/cpu_vs_pytorch.sh.

Trains the Fashion-MNIST CNN of graphs/fashion_mnist_cnn.yaml with PyTorch
(Debian's python3-torch, or a current torch from PyPI in a virtual
environment): conv 5x5x32 same + relu, max pool 2, conv 5x5x64
same + relu, max pool 2, dense 1024 + relu, dropout 0.4, dense 10; Adam
(lr 1e-3, eps 1e-7 as Keras/dtf-train), sparse softmax cross-entropy.
Weights Glorot-uniform, biases zero, as Keras.  Input NHWC (channels_last
memory format, so oneDNN sees the same layout dtf-train uses), from the same
IDX files that datasets/prepare.sh converts to TFRecord; the whole set is
read into memory once as uint8 (47 MB; each batch is scaled to float when
used), so no data loader sits in the timed loop.

One process:           python3 pytorch_cnn.py --threads 2 --batch 64 ...
DistributedDataParallel (gloo), one process per rank, launched like
dtf-train:             mpirun -np 2 python3 pytorch_cnn.py --threads 1 ...
(rank and world size come from Open MPI's environment; rendezvous on
127.0.0.1:$MASTER_PORT).  --batch is the GLOBAL batch, split over ranks.

Prints, from rank 0, lines the benchmark script parses:
  RESULT samples_per_s=X steps=N warmup=W        steady state, after warm-up
  RSS rank=R peak_mb=M                           every rank, ru_maxrss
  EVAL step=S seconds=T accuracy=A               with --eval-every
"""
import argparse
import gzip
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


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, prefix):
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    # kept as uint8 (N, 1, 28, 28), like dtf-train's records; each batch is
    # scaled to float in channels_last (NHWC) memory by batch()
    return torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def batch(x, idx):
    xb = x[idx].to(torch.float32).mul_(1.0 / 255.0)
    return xb.contiguous(memory_format=torch.channels_last)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.dense1 = nn.Linear(7 * 7 * 64, 1024)
        self.logits = nn.Linear(1024, 10)
        for m in (self.conv1, self.conv2, self.dense1, self.logits):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x.permute(0, 2, 3, 1), 1)  # NHWC flatten, as TF
        x = F.dropout(F.relu(self.dense1(x)), 0.4, self.training)
        return self.logits(x)


def evaluate(model, x, y, bs, rank, world):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(rank * bs, x.shape[0], world * bs):
            out = model(batch(x, slice(i, i + bs)))
            correct += int((out.argmax(1) == y[i:i + bs]).sum())
    model.train()
    t = torch.tensor([correct], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t)
    return float(t[0]) / x.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch", type=int, default=64, help="global batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--stop-at", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    if a.batch % world:
        sys.exit("pytorch_cnn.py: --batch %d is not divisible by %d ranks" % (a.batch, world))
    per = a.batch // world

    x, y = load(a.data_dir, "train")
    xt, yt = (load(a.data_dir, "t10k") if a.eval_every else (None, None))
    model = CNN().to(memory_format=torch.channels_last)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    steps_per_epoch = x.shape[0] // a.batch
    total = steps_per_epoch * a.epochs
    if a.steps:
        total = min(total, a.steps) if a.epochs > 1 else a.steps
    if rank == 0:
        print("pytorch %s: %d rank(s) x %d thread(s), global batch %d, %d steps"
              % (torch.__version__, world, a.threads, a.batch, total), flush=True)

    step, t_warm = 0, None
    g = torch.Generator().manual_seed(a.seed)
    while step < total:
        perm = torch.randperm(x.shape[0], generator=g)
        for s in range(steps_per_epoch):
            if step >= total:
                break
            idx = perm[s * a.batch + rank * per: s * a.batch + (rank + 1) * per]
            xb = batch(x, idx)
            loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == a.warmup:
                t_warm = time.time()
            if a.eval_every and step % a.eval_every == 0:
                acc = evaluate(model, xt, yt, per, rank, world)
                if rank == 0:
                    print("EVAL step=%d seconds=%.2f accuracy=%.4f"
                          % (step, time.time() - T_START, acc), flush=True)
                if a.stop_at and acc >= a.stop_at:
                    total = step
                    break
    t_end = time.time()
    if t_warm is not None and step > a.warmup and not a.eval_every:
        sps = (step - a.warmup) * a.batch / (t_end - t_warm)
        if rank == 0:
            print("RESULT samples_per_s=%.1f steps=%d warmup=%d" % (sps, step, a.warmup),
                  flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    # every rank reports; print in rank order
    for r in range(world):
        if world > 1:
            dist.barrier()
        if r == rank:
            print("RSS rank=%d peak_mb=%.1f" % (rank, rss), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
