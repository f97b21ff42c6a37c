#!/usr/bin/python3
"""The PyTorch side of the training benchmarks: the example models of
examples/jobs/ (same layers, initialization scheme, optimizer, batch size and
preprocessing) trained on the same Fashion-MNIST files. --model lstm is
fashion_lstm.json's model with nn.LSTM (28 inputs per row, 128 units, the
last hidden state into a 10-way linear layer; bench/lstm_bench.py).

Prints one JSON object: {"examples_per_sec", "steps", "threads", "final_loss",
"accuracy" (when --eval), "peak_rss_bytes"}. Run by bench/train_bench.py in its
own process, so its peak memory is its own.

With --ddp-world N (and --ddp-rank, --ddp-init tcp://host:port) it is one of N
processes training with DistributedDataParallel over Gloo (its default 25 MiB
buckets, reduced during the backward pass), each on its own --batch-size
share of a global batch; rank 0 prints the JSON, examples_per_sec counting
the global batch. Run so by bench/replicas_bench.py.
"""
import argparse
import gzip
import json
import math
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, _, dtype, rank = struct.unpack(">BBBB", data[:4])
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    assert dtype == 0x08, "only uint8 IDX files are expected here"
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


# The jobs' preprocessing: x / 255, then standardized with Fashion-MNIST's
# pixel mean and standard deviation.
PIXEL_MEAN, PIXEL_INV_STD = 0.286, 2.832861


def preprocess(x):
    return (x.astype(np.float32) * np.float32(1.0 / 255.0) - np.float32(PIXEL_MEAN)) * \
        np.float32(PIXEL_INV_STD)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)
        for m in (self.fc1, self.fc2, self.fc3):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = x.reshape(-1, 784)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 64, 1024)
        self.fc2 = nn.Linear(1024, 10)
        for m in (self.conv1, self.conv2, self.fc1, self.fc2):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = x.reshape(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.reshape(x.shape[0], -1)
        return self.fc2(F.relu(self.fc1(x)))


class Lstm(nn.Module):
    """Each image read row by row: 28 steps of 28 pixels."""

    def __init__(self, hidden=128):
        super().__init__()
        self.lstm = nn.LSTM(28, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 10)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        _, (h, _) = self.lstm(x.reshape(-1, 28, 28))
        return self.fc(h[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn", "lstm"], required=True)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--eval", action="store_true")
    p.add_argument("--cosine-decay-steps", type=int, default=0,
                   help="the jobs' cosine learning-rate decay (0: constant)")
    p.add_argument("--ddp-world", type=int, default=0,
                   help="train as one of N DistributedDataParallel processes (Gloo)")
    p.add_argument("--ddp-rank", type=int, default=0)
    p.add_argument("--ddp-init", default="", help="tcp://host:port of rank 0's rendezvous")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    world = max(a.ddp_world, 1)
    if a.ddp_world:
        dist.init_process_group("gloo", init_method=a.ddp_init, rank=a.ddp_rank,
                                world_size=a.ddp_world)
    x = read_idx(a.data + "/train-images-idx3-ubyte.gz")
    y = read_idx(a.data + "/train-labels-idx1-ubyte.gz")
    model = {"mlp": Mlp, "cnn": Cnn, "lstm": Lstm}[a.model]()
    if a.channels_last and a.model == "cnn":
        model = model.to(memory_format=torch.channels_last)
    if a.ddp_world:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-8)
    sched = None
    if a.cosine_decay_steps > 0:
        d = a.cosine_decay_steps
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, d) / d)))
    rng = np.random.default_rng(1)
    order = rng.permutation(len(x))
    # Rank r of N takes the r-th share of each global batch of N x batch_size.
    glob = a.batch_size * world
    n = len(x) // glob

    def batch(i):
        first = (i % n) * glob + a.ddp_rank * a.batch_size
        idx = order[first:first + a.batch_size]
        xb = torch.from_numpy(preprocess(x[idx]))
        yb = torch.from_numpy(y[idx].astype(np.int64))
        return xb, yb

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        return loss.item()

    for i in range(a.warmup):
        step(*batch(i))
    # Batches are prepared outside the timed region, as Flowstate's input
    # pipeline prepares them on a background thread.
    batches = [batch(a.warmup + i) for i in range(min(a.steps, 64))]
    losses = []
    if a.ddp_world:
        dist.barrier()
    t0 = time.perf_counter()
    for i in range(a.steps):
        losses.append(step(*batches[i % len(batches)]))
    secs = time.perf_counter() - t0
    out = {"examples_per_sec": a.steps * glob / secs, "steps": a.steps,
           "threads": a.threads, "final_loss": float(np.mean(losses[-50:]))}
    if a.ddp_world:
        out["world"] = world
        dist.destroy_process_group()
        if a.ddp_rank != 0:
            return 0
    if a.eval:
        xt = read_idx(a.data + "/t10k-images-idx3-ubyte.gz")
        yt = read_idx(a.data + "/t10k-labels-idx1-ubyte.gz")
        with torch.no_grad():
            pred = model(torch.from_numpy(preprocess(xt))).argmax(1).numpy()
        out["accuracy"] = float((pred == yt).mean())
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
