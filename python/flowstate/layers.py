"""Keras-like layers that build into a Graph: Dense, Flatten, Reshape, Dropout, Rescale.

A layer is called on an Output and returns one; it makes its variables on
the first call, from the input's static shape (``Output.shape``), under a
name scope of its own (``dense/w``, ``dense/b``, ``dense_1/w`` ...):

    x = g.placeholder("uint8", [None, 28, 28], name="x")
    h = layers.Rescale(1 / 255.0)(x)
    h = layers.Flatten()(h)
    h = layers.Dense(128, activation="relu")(h)
    logits = layers.Dense(10)(h)

Layers are written over the generated ops only; what they need of the
registry (MatMul, BiasAdd, Reshape, Relu, Dropout, ...) is looked up when
they are called.
"""

import numpy as np

from . import errors

ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softmax": "Softmax",
               "linear": None, None: None}


def _activation(g, name, x):
    try:
        op = ACTIVATIONS[name]
    except KeyError:
        raise errors.InvalidArgument("unknown activation %r (expected one of %s)"
                                     % (name, ", ".join(k for k in ACTIVATIONS if k)),
                                     field="activation") from None
    if op is None:
        return x
    y = getattr(g.ops, op)(x, name=name)
    y.shape = x.shape
    return y


class Layer:
    """A callable that adds nodes to the graph of its input."""

    default_name = "layer"

    def __init__(self, name=None):
        self.name = name
        self.built = False
        self.variables = []

    def _scope_name(self, g):
        if self.name is None:
            self.name = g.unique_scope(self.default_name)
        return self.name

    def __call__(self, x):
        g = x.graph
        with g.name_scope(self._scope_name(g)):
            if not self.built:
                self.build(g, x.shape)
                self.built = True
            return self.call(g, x)

    def build(self, g, input_shape):
        pass

    def call(self, g, x):
        raise NotImplementedError


class Dense(Layer):
    """y = activation(x @ w + b), x of shape [batch, in]."""

    default_name = "dense"

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", name=None):
        super().__init__(name)
        self.units, self.activation, self.use_bias = int(units), activation, use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, g, shape):
        if shape is None or len(shape) != 2 or shape[1] is None:
            raise errors.InvalidArgument(
                "Dense needs an input of shape [batch, features] with features known, got %s "
                "(add a Flatten first)" % (list(shape) if shape is not None else "an unknown shape"),
                node=self.name)
        self.w = g.Variable([shape[1], self.units], initializer=self.kernel_initializer, name="w")
        self.variables = [self.w]
        if self.use_bias:
            self.b = g.Variable([self.units], initializer=self.bias_initializer, name="b")
            self.variables.append(self.b)

    def call(self, g, x):
        y = g.MatMul(x, self.w, name="matmul")
        if self.use_bias:
            y = g.BiasAdd(y, self.b, name="pre" if self.activation else "bias_add")
        y.shape = (x.shape[0], self.units)
        return _activation(g, self.activation, y)


class Flatten(Layer):
    """[batch, d1, d2, ...] -> [batch, d1 * d2 * ...]."""

    default_name = "flatten"

    def call(self, g, x):
        if x.shape is None or any(d is None for d in x.shape[1:]):
            raise errors.InvalidArgument("Flatten needs the input's dimensions after the first, "
                                         "got %s" % (x.shape,), node=self.name)
        n = int(np.prod(x.shape[1:])) if len(x.shape) > 1 else 1
        y = g.Reshape(x, np.array([-1, n], np.int32), name="reshape")
        y.shape = (x.shape[0], n)
        return y


class Reshape(Layer):
    """[batch, ...] -> [batch] + target_shape."""

    default_name = "reshape"

    def __init__(self, target_shape, name=None):
        super().__init__(name)
        self.target_shape = tuple(int(d) for d in target_shape)

    def call(self, g, x):
        y = g.Reshape(x, np.array((-1,) + self.target_shape, np.int32), name="reshape")
        y.shape = (x.shape[0] if x.shape else None,) + self.target_shape
        return y


class Rescale(Layer):
    """x * scale + offset, cast to float32 first (images as uint8)."""

    default_name = "rescale"

    def __init__(self, scale, offset=0.0, name=None):
        super().__init__(name)
        self.scale, self.offset = float(scale), float(offset)

    def call(self, g, x):
        if x.dtype != "float32":
            x2 = g.Cast(x, DstT="float32", name="cast")
            x2.shape = x.shape
            x = x2
        y = g.Mul(x, np.float32(self.scale), name="scale")
        if self.offset:
            y = g.Add(y, np.float32(self.offset), name="offset")
        y.shape = x.shape
        return y


class Dropout(Layer):
    """Zeroes each element with probability `rate` in training (the server's Dropout op;
    evaluation and predict graphs replace it by Identity)."""

    default_name = "dropout"

    def __init__(self, rate, seed=0, name=None):
        super().__init__(name)
        if not 0 <= rate < 1:
            raise errors.InvalidArgument("Dropout rate must be in [0, 1), got %r" % (rate,),
                                         field="rate")
        self.rate, self.seed = float(rate), int(seed)

    def call(self, g, x):
        y, _ = g.Dropout(x, rate=self.rate, seed=self.seed, name="dropout")
        y.shape = x.shape
        return y


class Activation(Layer):
    default_name = "activation"

    def __init__(self, activation, name=None):
        super().__init__(name)
        self.activation = activation

    def call(self, g, x):
        return _activation(g, self.activation, x)
