// PRIVATE to tests/jobs: the Fashion-MNIST MLP (784-64-10, ReLU, softmax
// cross-entropy, an "accuracy" node) as a job's "graph" JSON, shared by the
// tests that train it.
#ifndef FLOWSTATE_TESTS_JOBS_FASHION_MLP_GRAPH_H_
#define FLOWSTATE_TESTS_JOBS_FASHION_MLP_GRAPH_H_

namespace flowstate::test {

inline constexpr const char* kFashionMlpGraph = R"({"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "uint8", "shape": [-1, 28, 28]}},
      {"name": "y", "op": "Placeholder", "attrs": {"dtype": "uint8", "shape": [-1]}},
      {"name": "xf", "op": "Cast", "inputs": ["x"], "attrs": {"DstT": "float32"}},
      {"name": "scale", "op": "Const", "attrs": {"dtype": "float32", "value": 0.00392156862745098}},
      {"name": "xs", "op": "Mul", "inputs": ["xf", "scale"]},
      {"name": "shape", "op": "Const", "attrs": {"dtype": "int32", "value": [-1, 784]}},
      {"name": "flat", "op": "Reshape", "inputs": ["xs", "shape"]},
      {"name": "w1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [784, 64], "init": "glorot_uniform"}},
      {"name": "b1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [64], "init": "zeros"}},
      {"name": "h", "op": "Relu", "inputs": ["h_pre"]},
      {"name": "h_pre", "op": "BiasAdd", "inputs": ["h_mm", "b1"]},
      {"name": "h_mm", "op": "MatMul", "inputs": ["flat", "w1"]},
      {"name": "w2", "op": "Variable", "attrs": {"dtype": "float32", "shape": [64, 10], "init": "glorot_uniform"}},
      {"name": "b2", "op": "Variable", "attrs": {"dtype": "float32", "shape": [10], "init": "zeros"}},
      {"name": "logits_mm", "op": "MatMul", "inputs": ["h", "w2"]},
      {"name": "logits", "op": "BiasAdd", "inputs": ["logits_mm", "b2"]},
      {"name": "xent", "op": "SparseSoftmaxCrossEntropyWithLogits", "inputs": ["logits", "y"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["xent", "axes"]},
      {"name": "one", "op": "Const", "attrs": {"dtype": "int32", "value": 1}},
      {"name": "pred", "op": "ArgMax", "inputs": ["logits", "one"], "attrs": {"output_type": "int64"}},
      {"name": "labels", "op": "Cast", "inputs": ["y"], "attrs": {"DstT": "int64"}},
      {"name": "hit", "op": "Equal", "inputs": ["pred", "labels"]},
      {"name": "hitf", "op": "Cast", "inputs": ["hit"], "attrs": {"DstT": "float32"}},
      {"name": "accuracy", "op": "Mean", "inputs": ["hitf", "axes"]}

    ]})";

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_JOBS_FASHION_MLP_GRAPH_H_
