"""Keras-like layers that build into a Graph: Dense, Conv2D, MaxPool2D, AveragePool2D,
BatchNormalization, Embedding, LSTM (a While), Flatten, Reshape, Dropout, Rescale, Activation.

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
                "(add a Flatten first)"
                % (list(shape) if shape is not None else "an unknown shape"),
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


def _pair(v):
    return (int(v), int(v)) if isinstance(v, (int, np.integer)) else tuple(int(x) for x in v)


def _conv_out(size, k, stride, padding):
    if size is None:
        return None
    if padding == "SAME":
        return -(-size // stride)
    return (size - k) // stride + 1


def _check_padding(padding):
    padding = padding.upper()
    if padding not in ("SAME", "VALID"):
        raise errors.InvalidArgument("padding is 'same' or 'valid', got %r" % (padding,),
                                     field="padding")
    return padding


def _nhwc(layer, shape):
    if shape is None or len(shape) != 4 or shape[3] is None:
        raise errors.InvalidArgument("%s needs an NHWC input [batch, height, width, channels] "
                                     "with channels known, got %s" % (type(layer).__name__, shape),
                                     node=layer.name)


class Conv2D(Layer):
    """2-D convolution of an NHWC input with `filters` kernels of kernel_size (HWIO weights).

    groups > 1 splits the input channels and the filters into that many groups, each
    filter seeing its group's channels only (Keras's `groups`); groups equal to the
    input channels is a depthwise convolution."""

    default_name = "conv2d"

    def __init__(self, filters, kernel_size, strides=1, padding="valid", activation=None,
                 use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 groups=1, name=None):
        super().__init__(name)
        self.filters, self.groups = int(filters), int(groups)
        if self.groups < 1 or self.filters % self.groups:
            raise errors.InvalidArgument("groups=%d must be >= 1 and divide filters=%d"
                                         % (self.groups, self.filters), field="groups")
        self.kernel_size, self.strides = _pair(kernel_size), _pair(strides)
        self.padding, self.activation, self.use_bias = _check_padding(padding), activation, use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer

    def build(self, g, shape):
        _nhwc(self, shape)
        if shape[3] % self.groups:
            raise errors.InvalidArgument("groups=%d does not divide the input's %d channels"
                                         % (self.groups, shape[3]), field="groups")
        self.w = g.Variable(list(self.kernel_size) + [shape[3] // self.groups, self.filters],
                            initializer=self.kernel_initializer, name="w")
        self.variables = [self.w]
        if self.use_bias:
            self.b = g.Variable([self.filters], initializer=self.bias_initializer, name="b")
            self.variables.append(self.b)

    def call(self, g, x):
        y = g.Conv2D(x, self.w, strides=[1, self.strides[0], self.strides[1], 1],
                     padding=self.padding, name="conv")
        if self.use_bias:
            y = g.BiasAdd(y, self.b, name="pre" if self.activation else "bias_add")
        y.shape = (x.shape[0],
                   _conv_out(x.shape[1], self.kernel_size[0], self.strides[0], self.padding),
                   _conv_out(x.shape[2], self.kernel_size[1], self.strides[1], self.padding),
                   self.filters)
        return _activation(g, self.activation, y)


class _Pool2D(Layer):
    op = None

    def __init__(self, pool_size=2, strides=None, padding="valid", name=None):
        super().__init__(name)
        self.pool_size = _pair(pool_size)
        self.strides = _pair(strides) if strides is not None else self.pool_size
        self.padding = _check_padding(padding)

    def call(self, g, x):
        _nhwc(self, x.shape)
        y = getattr(g, self.op)(x, ksize=[1, self.pool_size[0], self.pool_size[1], 1],
                                strides=[1, self.strides[0], self.strides[1], 1],
                                padding=self.padding, name="pool")
        y.shape = (x.shape[0],
                   _conv_out(x.shape[1], self.pool_size[0], self.strides[0], self.padding),
                   _conv_out(x.shape[2], self.pool_size[1], self.strides[1], self.padding),
                   x.shape[3])
        return y


class MaxPool2D(_Pool2D):
    default_name = "max_pool"
    op = "MaxPool"


class AveragePool2D(_Pool2D):
    default_name = "avg_pool"
    op = "AvgPool"


class BatchNormalization(Layer):
    """Normalizes over every dimension but the last (the server's BatchNorm: batch statistics
    and moving averages in training, the moving averages in evaluation graphs)."""

    default_name = "batch_norm"

    def __init__(self, momentum=0.99, epsilon=0.001, name=None):
        super().__init__(name)
        self.momentum, self.epsilon = float(momentum), float(epsilon)

    def build(self, g, shape):
        if shape is None or shape[-1] is None:
            raise errors.InvalidArgument("BatchNormalization needs the input's last dimension",
                                         node=self.name)
        c = [shape[-1]]
        self.gamma = g.Variable(c, initializer="ones", name="gamma")
        self.beta = g.Variable(c, initializer="zeros", name="beta")
        self.moving_mean = g.Variable(c, initializer="zeros", name="moving_mean")
        self.moving_variance = g.Variable(c, initializer="ones", name="moving_variance")
        self.variables = [self.gamma, self.beta, self.moving_mean, self.moving_variance]

    def call(self, g, x):
        y = g.BatchNorm(x, self.gamma, self.beta, self.moving_mean, self.moving_variance,
                        epsilon=self.epsilon, momentum=self.momentum, name="bn")[0]
        y.shape = x.shape
        return y


class Embedding(Layer):
    """Rows of a [input_dim, output_dim] table at integer indices (Gather; its gradient
    stays sparse on the server)."""

    default_name = "embedding"

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", name=None):
        super().__init__(name)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.initializer = embeddings_initializer

    def build(self, g, shape):
        self.table = g.Variable([self.input_dim, self.output_dim], initializer=self.initializer,
                                name="table")
        self.variables = [self.table]

    def call(self, g, x):
        if x.dtype not in ("int32", "int64"):
            ids = g.Cast(x, DstT="int64", name="ids")
            ids.shape = x.shape
            x = ids
        y = g.Gather(self.table, x, name="lookup")
        y.shape = (tuple(x.shape) if x.shape is not None else (None,)) + (self.output_dim,)
        return y


class LSTM(Layer):
    """An LSTM over [batch, time, features] as one While node; returns the last h
    [batch, units] (gates i, f, c, o from one [features + units, 4 units] product,
    forget bias 1). Gradients flow through the loop in a job's training graph."""

    default_name = "lstm"

    def __init__(self, units, parallel_iterations=2, forget_bias=1.0,
                 kernel_initializer="glorot_uniform", name=None):
        super().__init__(name)
        self.units, self.parallel_iterations = int(units), int(parallel_iterations)
        self.forget_bias, self.kernel_initializer = float(forget_bias), kernel_initializer

    def build(self, g, shape):
        if shape is None or len(shape) != 3 or shape[1] is None or shape[2] is None:
            raise errors.InvalidArgument("LSTM needs an input [batch, time, features] with time "
                                         "and features known, got %s" % (shape,), node=self.name)
        u = self.units
        self.wx = g.Variable([shape[2], 4 * u], initializer=self.kernel_initializer, name="wx")
        self.wh = g.Variable([u, 4 * u], initializer=self.kernel_initializer, name="wh")
        self.b = g.Variable([4 * u], initializer="zeros", name="b")
        self.variables = [self.wx, self.wh, self.b]

    def call(self, g, x):
        u = self.units
        rows = g.Transpose(x, np.array([1, 0, 2], np.int32), name="time_major")
        batch = g.Slice(g.Shape(x, name="shape"), np.array([0], np.int32),
                        np.array([1], np.int32), name="batch")
        state_shape = g.Concat([batch, np.array([u], np.int32)], np.int32(0), name="state_shape")
        h0 = g.Fill(state_shape, np.float32(0), name="h0")
        steps = g.constant(np.int32(x.shape[1]), name="steps")

        def body(i, h, c):
            x_t = g.Gather(rows, i, name="x_t")
            gates = g.BiasAdd(g.Add(g.MatMul(x_t, self.wx, name="xw"),
                                    g.MatMul(h, self.wh, name="hw"), name="sum"),
                              self.b, name="gates")
            i_g, f_g, cand, o_g = g.Split(np.int32(1), gates, num_split=4, name="split")
            forget = g.Sigmoid(g.Add(f_g, np.float32(self.forget_bias), name="forget_pre"),
                               name="forget_gate")
            c_new = g.Add(g.Mul(forget, c, name="kept"),
                          g.Mul(g.Sigmoid(i_g, name="input_gate"), g.Tanh(cand, name="candidate"),
                                name="written"), name="c_new")
            h_new = g.Mul(g.Sigmoid(o_g, name="output_gate"), g.Tanh(c_new, name="c_tanh"),
                          name="h_new")
            return [g.Add(i, np.int32(1), name="next_i"), h_new, c_new]

        _, h, _ = g.while_loop(lambda i, h, c: g.Less(i, steps, name="more"), body,
                               [np.int32(0), h0, h0], parallel_iterations=self.parallel_iterations,
                               name="while")
        h.shape = (x.shape[0], u)
        return h
