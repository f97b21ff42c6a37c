#!/usr/bin/python3
"""Exports the ONNX example models with fixed seeds, as a PyTorch user would:

    /usr/bin/python3 examples/onnx/export.py OUT [fashion_cnn resnet18 ...]

writes OUT/<name>.onnx for each model named (default: all). Every model
classifies Fashion-MNIST images (28 x 28) into 10 classes and outputs
logits named "logits" from an input named "input"; the batch dimension is
dynamic.

- fashion_cnn: two convolutions with BatchNorm, max pooling, a linear layer.
- resnet18: torchvision's ResNet-18, its first convolution 3x3 stride 1 on
  one channel and no first max pooling (28 x 28 images).
- mobilenet_v2: torchvision's MobileNetV2, its first convolution stride 1 on
  one channel.
- lstm: an nn.LSTM over the image's 28 rows, its last output to a linear layer.
- transformer: the rows embedded (linear, plus learned positions), one
  nn.TransformerEncoderLayer, the mean over rows, a linear layer.

They are exported for training (training=TrainingMode.TRAINING): PyTorch
then keeps BatchNormalization nodes (exported for inference, the default,
it folds each into the convolution before it) and every parameter apart
(for inference it merges parameters of equal values, such as the ones and
zeros of fresh normalization layers, which would then train tied).
Exporting runs the model once in training mode, which moves BatchNorm's
running statistics one step; the file holds them as moved. Flowstate trains
the models in training mode and evaluates them in inference mode.
"""
import os
import sys

import torch
from torch import nn

SEED = 0


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class RowLstm(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.lstm = nn.LSTM(28, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 10)

    def forward(self, x):  # x [batch, 28 rows, 28]
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


class RowTransformer(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.embed = nn.Linear(28, d)
        self.position = nn.Parameter(torch.randn(28, d) * 0.02)
        self.encoder = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.fc = nn.Linear(d, 10)

    def forward(self, x):  # x [batch, 28 rows, 28]
        h = self.encoder(self.embed(x) + self.position)
        return self.fc(h.mean(dim=1))


def build(name):
    """(model, example input) of a fresh model; the same numbers every time."""
    torch.manual_seed(SEED)
    image = torch.zeros(2, 1, 28, 28)
    rows = torch.zeros(2, 28, 28)
    if name == "fashion_cnn":
        return FashionCnn(), image
    if name == "resnet18":
        import torchvision
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        return m, image
    if name == "mobilenet_v2":
        import torchvision
        m = torchvision.models.mobilenet_v2(num_classes=10)
        m.features[0][0] = nn.Conv2d(1, 32, 3, 1, 1, bias=False)
        return m, image
    if name == "lstm":
        return RowLstm(), rows
    if name == "transformer":
        return RowTransformer(), rows
    raise ValueError("no model '%s'" % name)


NAMES = ["fashion_cnn", "resnet18", "mobilenet_v2", "lstm", "transformer"]


def export(model, example, path):
    torch.onnx.export(model, example, path, opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or NAMES:
        model, example = build(name)
        path = os.path.join(out, name + ".onnx")
        export(model, example, path)
        print("%s: %d bytes, %d parameters" % (path, os.path.getsize(path),
                                                sum(p.numel() for p in model.parameters())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
