#!/usr/bin/env python3
"""The Fashion-MNIST LSTM of examples/jobs/fashion_lstm.json (rows as time steps), with flowstate.

    python3 examples/python/fashion_lstm.py [--server grpc://127.0.0.1:50051] [--max-steps N]
"""
import argparse

import flowstate
from flowstate import layers

p = argparse.ArgumentParser()
p.add_argument("--server", default="grpc://127.0.0.1:50051")
p.add_argument("--max-steps", type=int, default=0)
a = p.parse_args()

F = "fashion-mnist/%s-%s-idx%d-ubyte.gz"
client = flowstate.Client(a.server)
model = flowstate.Sequential(client, [
    layers.Rescale(2.832861 / 255, -0.286 * 2.832861),  # [batch, 28 rows, 28 pixels]
    layers.LSTM(128, parallel_iterations=2),             # one While node over the rows
    layers.Dense(10, name="logits_dense"),
], input_shape=(28, 28), input_dtype="uint8", name="fashion-lstm-py")
model.compile(optimizer={"type": "adam", "learning_rate": 0.002,
                         "schedule": {"type": "cosine_decay", "decay_steps": 1407}},
              metrics=["accuracy", "loss"])
test = {"x": F % ("t10k", "images", 3), "y": F % ("t10k", "labels", 1)}
model.fit(files={"x": F % ("train", "images", 3), "y": F % ("train", "labels", 1)},
          validation_files=test, epochs=3, batch_size=128, max_steps=a.max_steps or None,
          checkpoint={"every_steps": 500, "keep": 3}, devices=["CPU:0"])
print("test accuracy %.4f" % model.evaluate()["accuracy"])
