#!/usr/bin/env python3
"""Writes ONNX test cases exported by PyTorch (torch.onnx.export, opset 14,
dynamic batch) in the layout of ONNX's backend test data, for
tests/onnx/onnx_conformance:  <out>/torch/<case>/model.onnx and
test_data_set_0/input_K.pb, output_K.pb (serialized TensorProtos, written
with torch and numpy only: no onnx package needed).

    /usr/bin/python3 tests/onnx/torch_cases.py OUT
    build/tests/onnx_conformance --data OUT --sets torch -v

Models: an MLP, a CNN with BatchNorm (eval) and pooling, a depthwise block,
an LSTM and a GRU classifier over rows, a TransformerEncoderLayer. Fixed
seeds; the batch fed (3) differs from the batch exported (2)."""
import os
import struct
import sys

import numpy as np

try:
    import torch
    from torch import nn
except ImportError:  # ctest: skipped (scripts/install-deps --bench installs it)
    print("torch_cases.py: python3-torch is not installed; skipped")
    sys.exit(77)

# TensorProto by hand: field numbers of onnx.proto (dims 1, data_type 2,
# name 8, raw_data 9); element types FLOAT 1, INT64 7.
TYPES = {np.dtype(np.float32): 1, np.dtype(np.int64): 7}


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tensor_proto(a, name):
    a = np.ascontiguousarray(a)
    out = bytearray()
    for d in a.shape:
        out += b"\x08" + varint(d)
    out += b"\x10" + varint(TYPES[a.dtype])
    nb = name.encode()
    out += b"\x42" + varint(len(nb)) + nb
    raw = a.tobytes()
    out += b"\x4a" + varint(len(raw)) + raw
    return bytes(out)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(),
                                 nn.Dropout(0.2), nn.Linear(64, 10), nn.LogSoftmax(dim=1))

    def forward(self, x):
        return self.net(x)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16),
            nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)


class Depthwise(nn.Module):  # a MobileNetV2-style inverted residual
    def __init__(self):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(4, 24, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False),
                                nn.BatchNorm2d(24), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(24, 4, 1, bias=False), nn.BatchNorm2d(4))

    def forward(self, x):
        return x + self.project(self.dw(self.expand(x)))


class Rows(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(28, 32, batch_first=True)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        out, _ = self.rnn(x.squeeze(1))
        return self.fc(out[:, -1, :])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(28, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        h = self.layer(self.embed(x.squeeze(1)))
        return self.fc(h.mean(dim=1))


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    cases = {"mlp": Mlp(), "cnn_bn": Cnn(), "depthwise": Depthwise(), "lstm_rows": Rows(nn.LSTM),
             "gru_rows": Rows(nn.GRU), "transformer": Encoder()}
    for name, model in cases.items():
        model.eval()
        for m in model.modules():  # non-trivial BatchNorm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
        shape = (1, 4, 8, 8) if name == "depthwise" else (1, 1, 28, 28)
        export_x = torch.randn(2, *shape[1:])
        x = torch.randn(3, *shape[1:])
        d = os.path.join(out, "torch", name)
        os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
        torch.onnx.export(model, export_x, os.path.join(d, "model.onnx"), opset_version=14,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        with torch.no_grad():
            y = model(x)
        with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(tensor_proto(x.numpy(), "x"))
        with open(os.path.join(d, "test_data_set_0", "output_0.pb"), "wb") as f:
            f.write(tensor_proto(y.numpy(), "y"))


if __name__ == "__main__":
    main()
