#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, fuzz/corpus/<target>/, from
documents the tests use (tests/api, tests/server, examples/jobs). Run it
again after changing it; the files are checked in. Standard library only:
the protobuf and checkpoint seeds are encoded here by hand."""
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(ROOT, "corpus")

LINEAR_GRAPH = """{"nodes": [
  {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
  {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
  {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
  {"name": "p", "op": "MatMul", "inputs": ["x", "w"], "attrs": {"transpose_a": false}},
  {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
  {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},
  {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
  {"name": "pred", "op": "Reshape", "inputs": ["pb", "flat"]},
  {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
  {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
  {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"], "device": "/device:CPU:0"}
]}"""

DOUBLE_GRAPH = """{"nodes": [
  {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
  {"name": "two", "op": "Const", "attrs": {"dtype": "float32", "value": 2.0}},
  {"name": "y", "op": "Mul", "inputs": ["x", "two", "^two"]}
]}"""

GRAPHS = {
    "linear": LINEAR_GRAPH,
    "double": DOUBLE_GRAPH,
    "empty": "{}",
    "no_nodes": '{"nodes": []}',
    "const_kinds": """{"nodes": [
      {"name": "a", "op": "Const", "attrs": {"value": {"dtype": "int64", "shape": [2], "data": [1, -2]}}},
      {"name": "b", "op": "Const", "attrs": {"dtype": "uint8", "value": {"shape": [3], "b64": "AQID"}}},
      {"name": "c", "op": "Const", "attrs": {"value": [[true, false]]}},
      {"name": "d", "op": "Const", "attrs": {"dtype": "float32", "value": ["NaN", "Infinity", 1e-3]}},
      {"name": "e", "op": "Const", "attrs": {"dtype": "bfloat16", "value": [1.5]}},
      {"name": "f", "op": "Placeholder", "attrs": {"dtype": "float16", "shape": null, "_class": ["x"], "_n": 3}}
    ]}""",
    "conv": """{"nodes": [
      {"name": "image", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 28, 28, "?"]}},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [5, 5, 1, 32], "init": "glorot_uniform"}},
      {"name": "conv", "op": "Conv2D", "inputs": ["image", "w"], "attrs": {"strides": [1, 1, 1, 1], "padding": "SAME"}},
      {"name": "cast", "op": "Cast", "inputs": ["conv:0"], "attrs": {"DstT": "float64"}}
    ]}""",
    "escapes": '{"nodes": [{"name": "x\\u0031", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [\"?\"]}}]}',
    "while_if": """{"nodes": [
      {"name": "n", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": []}},
      {"name": "one", "op": "Const", "attrs": {"value": 1}},
      {"name": "loop", "op": "While", "loop_vars": ["one", "one"], "parallel_iterations": 4,
       "cond": {"args": ["i", "s"], "output": "le", "nodes": [{"name": "le", "op": "LessEqual", "inputs": ["i", "n"]}]},
       "body": {"args": ["i", "s"], "outputs": ["next", "pick"], "nodes": [
         {"name": "next", "op": "Add", "inputs": ["i", "one"]},
         {"name": "big", "op": "Greater", "inputs": ["s", "n"]},
         {"name": "pick", "op": "If", "pred": "big", "inputs": ["s"],
          "then": {"args": ["v"], "outputs": ["v"]},
          "else": {"args": ["v"], "outputs": ["twice"], "nodes": [{"name": "twice", "op": "Add", "inputs": ["v", "v"]}]}}]}},
      {"name": "out", "op": "Identity", "inputs": ["loop:1"]}
    ]}""",
    "raw_loop": """{"nodes": [
      {"name": "x", "op": "Const", "attrs": {"value": 0.5}},
      {"name": "enter", "op": "Enter", "inputs": ["x"], "attrs": {"frame_name": "f", "parallel_iterations": 2}},
      {"name": "merge", "op": "Merge", "inputs": ["enter", "next"]},
      {"name": "limit", "op": "Const", "inputs": ["^merge"], "attrs": {"value": 8.0}},
      {"name": "less", "op": "Less", "inputs": ["merge", "limit"]},
      {"name": "cond", "op": "LoopCond", "inputs": ["less"]},
      {"name": "switch", "op": "Switch", "inputs": ["merge", "cond"]},
      {"name": "exit", "op": "Exit", "inputs": ["switch:0"]},
      {"name": "body", "op": "Identity", "inputs": ["switch:1"]},
      {"name": "twice", "op": "Add", "inputs": ["body", "body"]},
      {"name": "next", "op": "NextIteration", "inputs": ["twice"]}
    ]}""",
    "partitioned": """{"nodes": [
      {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int64", "shape": [-1]}},
      {"name": "table", "op": "Variable",
       "attrs": {"dtype": "float32", "shape": [10, 4], "init": "normal", "partitions": 3,
                 "partition_strategy": "div", "partition_devices": ["CPU:0", "/job:worker/task:1"]}},
      {"name": "rows", "op": "Gather", "inputs": ["table", "ids"]},
      {"name": "whole", "op": "Identity", "inputs": ["table"]}
    ]}""",
    "queues": """{"nodes": [
      {"name": "q", "op": "PaddingFIFOQueue",
       "attrs": {"component_types": ["float32", "int32"], "shapes": [[-1, 2], []], "capacity": 8}},
      {"name": "s", "op": "RandomShuffleQueue",
       "attrs": {"component_types": ["int64"], "shapes": [[]], "min_after_dequeue": 2, "seed": 7}},
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
      {"name": "y", "op": "Const", "attrs": {"dtype": "int32", "value": 3}},
      {"name": "enqueue", "op": "QueueEnqueue", "inputs": ["q", "x", "y"], "attrs": {"timeout_ms": -1}},
      {"name": "n", "op": "Const", "attrs": {"dtype": "int32", "value": 2}},
      {"name": "batch", "op": "QueueDequeueUpTo", "inputs": ["q", "n"],
       "attrs": {"component_types": ["float32", "int32"]}},
      {"name": "one", "op": "QueueDequeue", "inputs": ["s"], "attrs": {"component_types": ["int64"]}},
      {"name": "size", "op": "QueueSize", "inputs": ["q"]},
      {"name": "close", "op": "QueueClose", "inputs": ["q"], "attrs": {"cancel_pending_enqueues": true}}
    ]}""",
}

TENSORS = {
    "data_f32": '{"dtype":"float32","shape":[2,2],"data":[1.0,2.5,3.0,4.0]}',
    "b64_i32": '{"dtype":"int32","shape":[2],"b64":"AQAAAP7///8="}',
    "nested": '[[1, 2], [3, 4]]',
    "nonfinite": '["nan", "inf", "-INFINITY", "+Inf", 1]',
    "shape_only": '{"shape": [2], "data": [1, 2]}',
    "bf16": '{"dtype": "bfloat16", "shape": [1], "data": [3]}',
    "u8_b64": '{"shape": [1], "b64": "AQ=="}',
    "scalar": '0.5',
    "bools": '[true, false, true]',
    "big_int": '[123456789012345678901, -9223372036854775808]',
    "empty_dims": '{"dtype": "float32", "shape": [0, 3], "data": []}',
}

REQUESTS = {
    "run": '{"feeds": {"x:0": [[1, 2], [3, 4]], "y": {"dtype": "float32", "shape": [2], "data": [0.5, 1]}},'
           ' "fetches": ["loss", "p:0"], "targets": ["train"], "encoding": "b64"}',
    "run_empty": '{"feeds": null, "fetches": null, "targets": null, "encoding": null}',
    "run_timeout": '{"fetches": ["batch:0"], "timeout_ms": 250, "trace": true}',
    "predict": '{"inputs": {"x": {"dtype": "uint8", "shape": [1, 2], "b64": "AAE="}}, "fetches": ["y"], "encoding": "nested"}',
    "session": '{"graph": ' + DOUBLE_GRAPH + '}',
    "outputs": '{"outputs": {"loss": 0.5, "y:1": [1, 2]}}',
    "error": '{"error": {"code": "INVALID_ARGUMENT", "message": "graph.nodes[2]: bad", "node": "w"}}',
    "run_packed": '{"feeds": {"x": {"dtype": "float32", "shape": [4], "data": [1, 2.5, -3e2, 4]}}, "fetches": ["y"]}',
}

JOB = """{
  "name": "line",
  "graph": %s,
  "loss": "loss",
  "optimizer": {"type": "adam", "learning_rate": 0.01, "schedule": {"type": "exponential_decay", "decay_steps": 10, "decay_rate": 0.9, "staircase": true}},
  "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
            "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16, "epochs": 2,
            "shuffle": false, "drop_remainder": true, "prefetch": 2, "header": true, "delimiter": ","},
  "eval": {"files": {"x": "points.csv", "y": "points.csv"}, "metrics": ["loss"], "every_epochs": 1},
  "checkpoint": {"every_steps": 50, "every_seconds": 0.5, "keep": 2},
  "devices": ["CPU:0"], "replicas": 1, "seed": 5, "max_steps": 10,
  "init_from": {"job": "job-1", "step": 3}
}""" % LINEAR_GRAPH


# --- protobuf wire format (api/flowstate.proto), by hand ---------------------
def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 1:
        return key + struct.pack("<d", payload)
    return key + varint(len(payload)) + payload


def s(num, text):
    return field(num, 2, text.encode() if isinstance(text, str) else text)


def tensor(dtype, shape, content):
    return s(1, dtype) + b"".join(field(2, 0, d) for d in shape) + s(3, content)


def attr(key, value):  # a map<string, AttrValue> entry
    return s(4, s(1, key) + s(2, value))


def node(name, op, inputs=(), attrs=b"", device=""):
    return s(1, name) + s(2, op) + b"".join(s(3, i) for i in inputs) + attrs + (s(5, device) if device else b"")


F32_2 = struct.pack("<2f", 1.0, 2.0)
GRAPH_PB = (
    s(1, node("x", "Placeholder", attrs=attr("dtype", s(5, "float32")) + attr("shape", s(6, field(2, 0, 2) + field(2, 0, (1 << 64) - 1)))))
    + s(1, node("two", "Const", attrs=attr("value", s(7, tensor("float32", [], struct.pack("<f", 2.0))))))
    + s(1, node("y", "Mul", inputs=["x", "two:0", "^two"], device="/device:CPU:0"))
    + s(1, node("l", "Const", attrs=attr("dtype", s(5, "int32")) + attr("value", s(7, tensor("int32", [2], struct.pack("<2i", 1, 2))))
                + attr("_ints", s(8, field(1, 0, 3))) + attr("_f", field(2, 1, 0.5)) + attr("_b", field(3, 0, 1))
                + attr("_s", s(4, "x")) + attr("_shapes", s(12, s(1, field(1, 0, 1)))) + attr("_types", s(11, s(1, "float32")))
                + attr("_floats", s(9, field(1, 1, 1.5))) + attr("_strs", s(10, s(1, "a")))))
)
GRPC = {  # first byte: the message (fuzz/entries.h, GrpcRequests)
    "create_json": bytes([0]) + s(1, DOUBLE_GRAPH),
    "create_graph": bytes([0]) + s(2, GRAPH_PB),
    "extend_graph": bytes([1]) + s(1, "s-1") + s(3, GRAPH_PB),
    "extend_json": bytes([1]) + s(1, "s-1") + s(2, '{"nodes": []}'),
    "run": bytes([2]) + s(1, "s-1") + s(2, s(1, "x:0") + s(2, tensor("float32", [2], F32_2)))
           + s(3, "y") + s(3, "y:1") + s(4, "train"),
    "predict": bytes([3]) + s(1, "job-1") + s(2, s(1, "x") + s(2, tensor("uint8", [1, 2], b"\x00\x01"))) + s(3, "y"),
    "tensor_f32": bytes([4]) + tensor("float32", [2], F32_2),
    "tensor_bool": bytes([4]) + tensor("bool", [3], b"\x01\x00\x01"),
    "tensor_bf16": bytes([4]) + tensor("bfloat16", [1, 1], b"\x80\x3f"),
    "graph": bytes([5]) + GRAPH_PB,
}


# --- checkpoint export files (checkpoints/FORMAT.md) ---------------------------
def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def export_file(step, tensors, metadata=b""):
    body = struct.pack("<QQQ", step, len(tensors), len(metadata)) + metadata
    out = b"FSCKPT\r\n" + struct.pack("<II", 1, crc32c(body)) + body
    for name, dtype, dims, data in tensors:
        e = struct.pack("<I", len(name)) + name + bytes([dtype, 0, 0, 0]) + struct.pack("<I", len(dims))
        e += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<Q", len(data))
        out += struct.pack("<I", crc32c(e + data)) + e + data
    return out + b"FSCKEND\n"


META = b'{"format":"flowstate.job_snapshot.v1","step":3,"epoch":0,"offset":48,"seed":"5","kernel_states":{}}'
CHECKPOINTS = {
    "two_tensors": export_file(3, [(b"w", 1, [2, 1], struct.pack("<2f", 0.5, -1.0)),
                                   (b"global_step", 4, [], struct.pack("<q", 3))], META),
    "empty": export_file(0, []),
    "kinds": export_file(7, [(b"u8", 5, [3], b"\x01\x02\x03"), (b"b", 6, [2], b"\x01\x00"),
                             (b"h", 7, [1], b"\x00\x3c"), (b"z", 2, [0, 4], b"")]),
}


# distributed/tensor_wire_internal.h: another task's RecvTensor responses and
# RecvTensorStream chunks (api/worker.proto). First byte: even, a response;
# odd, chunks (each a one-byte length and its bytes); the rest of it picks
# the slice size.
F32_2x3 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)


def chunk(dtype=None, shape=(), total=None, offset=0, data=b"", status=None):
    out = b""
    if status is not None:
        out += s(1, status)
    if dtype is not None:
        out += s(2, dtype) + s(3, b"".join(varint(d) for d in shape)) + field(4, 0, total)
    return out + field(5, 0, offset) + s(6, data)


def chunks(*parts):
    return bytes([1]) + b"".join(bytes([len(p)]) + p for p in parts)


WIRE = {
    "float_2x3": bytes([0]) + s(1, tensor("float32", [2, 3], F32_2x3)),
    "float_2x3_sliced": bytes([6]) + s(1, tensor("float32", [2, 3], F32_2x3)),
    "bool": bytes([0]) + s(1, tensor("bool", [3], b"\x01\x00\x01")),
    "empty": bytes([0]) + s(1, s(1, "int64") + field(2, 0, 0)),
    "scalar_dead": bytes([0]) + s(1, tensor("float64", [], struct.pack("<d", 2.5))) + field(2, 0, 1),
    "status": bytes([0]) + s(3, field(1, 0, 10) + s(2, "/job:worker/task:1: step aborted") + s(3, "n")),
    "chunks_2": chunks(chunk("float32", [2, 3], 24, 0, F32_2x3[:12]), chunk(offset=12, data=F32_2x3[12:])),
    "chunks_one": chunks(chunk("int32", [2], 8, 0, struct.pack("<2i", 7, -7))),
    "chunks_status": chunks(chunk(status=field(1, 0, 14) + s(2, "/job:worker/task:2: gone"))),
}


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    for k, v in GRAPHS.items():
        write("graph_json", k, v)
    for i, (k, v) in enumerate(TENSORS.items()):
        write("tensor_json", k, bytes([i % 10]) + v.encode())  # first byte: the dtype asked for
    for k, v in REQUESTS.items():
        write("requests", k, v)
    write("job_spec", "full", JOB)
    write("job_spec", "minimal", '{"graph": %s, "loss": "loss", "optimizer": {"type": "sgd", "learning_rate": 0.1},'
          ' "input": {"format": "idx", "files": {"x": "x.idx", "y": "y.idx"}}}' % DOUBLE_GRAPH)
    jobs = os.path.join(ROOT, "..", "examples", "jobs")
    for f in sorted(os.listdir(jobs)):
        with open(os.path.join(jobs, f), "rb") as src:
            write("job_spec", f.replace(".json", ""), src.read())
    for k, v in GRPC.items():
        write("grpc_requests", k, v)
    for k, v in CHECKPOINTS.items():
        write("checkpoint_import", k, v)
    for k, v in WIRE.items():
        write("tensor_wire", k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
