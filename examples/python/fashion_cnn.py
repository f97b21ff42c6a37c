#!/usr/bin/env python3
"""The Fashion-MNIST CNN of examples/jobs/fashion_cnn.json, written with `import flowstate`.

    python3 examples/python/fashion_cnn.py [--server grpc://127.0.0.1:50051] [--max-steps N]
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
    layers.Rescale(2.832861 / 255, -0.286 * 2.832861), layers.Reshape((28, 28, 1)),
    layers.Conv2D(32, 5, padding="same", activation="relu", name="conv1"),
    layers.MaxPool2D(2, padding="same", name="pool1"),
    layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2"),
    layers.MaxPool2D(2, padding="same", name="pool2"),
    layers.Flatten(), layers.Dense(1024, activation="relu", name="fc1"), layers.Dense(10),
], input_shape=(28, 28), input_dtype="uint8", name="fashion-cnn-py")
model.compile(optimizer={"type": "adam", "learning_rate": 0.001,
                         "schedule": {"type": "cosine_decay", "decay_steps": 938}},
              metrics=["accuracy", "loss"])
test = {"x": F % ("t10k", "images", 3), "y": F % ("t10k", "labels", 1)}
model.fit(files={"x": F % ("train", "images", 3), "y": F % ("train", "labels", 1)},
          validation_files=test, epochs=2, batch_size=128, max_steps=a.max_steps or None,
          checkpoint={"every_steps": 500, "keep": 3}, devices=["CPU:0"])
print("test accuracy %.4f" % model.evaluate()["accuracy"])
