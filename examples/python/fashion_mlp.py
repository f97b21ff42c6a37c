#!/usr/bin/env python3
"""The Fashion-MNIST MLP of examples/jobs/fashion_mlp.json, written with `import flowstate`.

    python3 examples/python/fashion_mlp.py [--server grpc://127.0.0.1:50051] [--max-steps N]
"""
import argparse
import gzip

import numpy as np

import flowstate
from flowstate import layers

p = argparse.ArgumentParser()
p.add_argument("--server", default="grpc://127.0.0.1:50051")
p.add_argument("--max-steps", type=int, default=0)
p.add_argument("--data-root", default="/usr/share/datasets")
a = p.parse_args()

F = "fashion-mnist/%s-%s-idx%d-ubyte.gz"
client = flowstate.Client(a.server)
model = flowstate.Sequential(client, [
    layers.Rescale(2.832861 / 255, -0.286 * 2.832861), layers.Flatten(),
    layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu"), layers.Dense(10),
], input_shape=(28, 28), input_dtype="uint8", name="fashion-mlp-py")
model.compile(optimizer={"type": "adam", "learning_rate": 0.001,
                         "schedule": {"type": "cosine_decay", "decay_steps": 1407}},
              metrics=["accuracy", "loss"])
test = {"x": F % ("t10k", "images", 3), "y": F % ("t10k", "labels", 1)}
history = model.fit(files={"x": F % ("train", "images", 3), "y": F % ("train", "labels", 1)},
                    validation_files=test, epochs=3, batch_size=128, max_steps=a.max_steps or None)
print("test accuracy %.4f" % model.evaluate()["accuracy"])
with gzip.open("%s/%s" % (a.data_root, F % ("t10k", "images", 3))) as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16)[:8 * 784].reshape(8, 28, 28)
print("predicted classes of 8 test images:", model.predict(images).tolist())
