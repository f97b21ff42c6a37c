#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_onnx_model, fuzz/corpus/onnx_model/: small
ONNX models built with Debian's python3-onnx (an MLP, a CNN block, shape
arithmetic, a Resize, an external-data reference, a TensorProto) and cut or
damaged copies. Run it again after changing it; the files are checked in."""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "corpus", "onnx_model")


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="flowstate-fuzz")
    m.ir_version = 8
    return m


def vi(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def seeds():
    rng = np.random.default_rng(0)
    yield "mlp", model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
         helper.make_node("Relu", ["h"], ["r"], name="act"),
         helper.make_node("Softmax", ["r"], ["y"], name="sm", axis=-1)],
        [vi("x", ["batch", 4])], [vi("y", ["batch", 3])],
        [init("w", rng.standard_normal((3, 4)).astype(np.float32)),
         init("b", np.zeros(3, np.float32))])
    yield "cnn", model(
        [helper.make_node("Conv", ["x", "k"], ["c"], name="conv", pads=[1, 1, 1, 1],
                          strides=[2, 2], group=1),
         helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"], name="bn"),
         helper.make_node("MaxPool", ["n"], ["p"], name="pool", kernel_shape=[2, 2],
                          ceil_mode=1),
         helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["y"], name="flat")],
        [vi("x", [1, 2, 9, 9])], [vi("y", [1, 4])],
        [init("k", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)),
         init("s", np.ones(4, np.float32)), init("o", np.zeros(4, np.float32)),
         init("m", np.zeros(4, np.float32)), init("v", np.ones(4, np.float32))])
    yield "shapes", model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i"], ["d"], name="gather", axis=0),
         helper.make_node("Unsqueeze", ["d", "a"], ["u"], name="unsq"),
         helper.make_node("Concat", ["u", "m1"], ["t"], name="cat", axis=0),
         helper.make_node("Reshape", ["x", "t"], ["r"], name="reshape"),
         helper.make_node("Slice", ["r", "st", "en"], ["y"], name="slice")],
        [vi("x", ["n", 2, 3])], [vi("y", None)],
        [init("i", np.array(0, np.int64)), init("a", np.array([0], np.int64)),
         init("m1", np.array([-1], np.int64)), init("st", np.array([0, 1], np.int64)),
         init("en", np.array([2**62, 5], np.int64))])
    yield "resize", model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], name="resize", mode="linear")],
        [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])],
        [init("sc", np.array([1, 1, 2, 2], np.float32))])
    ext = model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                [vi("x", [2])], [vi("y", [2])], [init("w", np.ones(2, np.float32))])
    w = ext.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../outside.bin")
    yield "external", ext
    yield "loss", model(
        [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="sce",
                          reduction="mean", ignore_index=1)],
        [vi("x", [3, 5]), vi("t", [3], TensorProto.INT64)], [vi("y", [])])


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for name, m in seeds():
        data = m.SerializeToString()
        with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
            f.write(data)
        with open(os.path.join(OUT, name + "_cut.onnx"), "wb") as f:
            f.write(data[: len(data) * 2 // 3])
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "t")
    with open(os.path.join(OUT, "tensor.pb"), "wb") as f:
        f.write(t.SerializeToString())


if __name__ == "__main__":
    main()
