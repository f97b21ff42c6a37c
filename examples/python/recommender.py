#!/usr/bin/env python3
"""The recommender of examples/jobs/recommender.json with flowstate's graph builder and layers.

    examples/data/make_clicks.py DATA_ROOT/clicks      # then serve with --data-root DATA_ROOT
    python3 examples/python/recommender.py [--server grpc://127.0.0.1:50051] [--max-steps N]
"""
import argparse

import flowstate
from flowstate import layers

p = argparse.ArgumentParser()
p.add_argument("--server", default="grpc://127.0.0.1:50051")
p.add_argument("--max-steps", type=int, default=0)
a = p.parse_args()

client = flowstate.Client(a.server)
g = client.graph()
user, item, y = (g.placeholder("int32", [None], name=n) for n in ("user", "item", "y"))
u = layers.Embedding(2000, 16, "normal", name="user_emb")(user)
i = layers.Embedding(500, 16, "normal", name="item_emb")(item)
h = g.Concat([u, i, g.Mul(u, i, name="user_x_item")], 1, name="features")
h.shape = (None, 48)
logits = layers.Dense(2, name="logits")(layers.Dense(64, activation="relu", name="dense1")(h))
labels = g.Cast(y, DstT="int64", name="labels")
g.Mean(g.SparseSoftmaxCrossEntropyWithLogits(logits, labels, name="xent")[0], [], name="loss")
correct = g.Equal(g.ArgMax(logits, 1, output_type="int64", name="predicted"), labels)
g.Mean(g.Cast(correct, DstT="float32"), [], name="accuracy")
cols = {n: {"columns": [c], "dtype": "int32"} for n, c in zip(("user", "item", "y"),
                                                              ("user", "item", "click"))}
job = client.jobs.submit({
    "name": "recommender-py", "graph": g, "loss": "loss", "seed": 1,
    "optimizer": {"type": "adam", "learning_rate": 0.01,
                  "schedule": {"type": "cosine_decay", "decay_steps": 2346}},
    "input": {"format": "csv", "files": dict.fromkeys(cols, "clicks/train.csv"), "columns": cols,
              "header": True, "batch_size": 256, "shuffle": True, "epochs": 3},
    "eval": {"files": dict.fromkeys(cols, "clicks/test.csv"), "metrics": ["accuracy", "loss"],
             "every_epochs": 1, "batch_size": 2000}},
    **({"max_steps": a.max_steps} if a.max_steps else {}))
print("test accuracy %.4f (Bayes rate 0.875)" % job.wait().metrics["accuracy"])
