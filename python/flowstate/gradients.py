"""Graph.gradients: the server differentiates a client's graph (POST /v1/gradients,
gRPC Graphs/Gradients) and the client appends the nodes it returns.

    g = client.graph()
    x = g.placeholder("float32", [None, 3], name="x")
    w = g.Variable([3, 1], name="w")
    loss = g.Mean(g.Square(g.MatMul(x, w)), np.array([0, 1], np.int32), name="loss")
    dw, = g.gradients(loss, [w])          # an Output: "gradients/.../w_grad"
    step = g.AssignSub(w, dw * 0.1)       # plain SGD, built by hand
"""

from . import errors


class IndexedSlices:
    """A sparse gradient: rows ``indices`` of a tensor of shape ``dense_shape`` hold
    ``values`` (summed where an index repeats)."""

    def __init__(self, indices, values, dense_shape):
        self.indices, self.values, self.dense_shape = indices, values, dense_shape

    def __repr__(self):
        return "IndexedSlices(%s, %s, %s)" % (self.indices.name, self.values.name,
                                              self.dense_shape.name)


class GradientsMixin:
    """Graph.gradients (graph.py's Graph; needs its _client, set by client.graph())."""

    def gradients(self, y, xs, prefix="gradients"):
        """The gradients of ``y`` (a tensor; summed when not a scalar) with respect to
        each of ``xs``, computed by the server's differentiation (graph/gradients.h) and
        added to this graph as ordinary nodes under ``prefix`` (``gradients/...``).

        Returns one entry per x: an Output; an ``IndexedSlices(indices, values,
        dense_shape)`` for the rows a Gather reads (an embedding's); None when x does
        not affect y. A graph from ``client.graph()`` asks its client; the added
        nodes reach a session with the next run (an extend). Through a loop
        (``while_loop``) the server answers Unimplemented: a job differentiates those.
        """
        client = getattr(self, "_client", None)
        if client is None:
            raise errors.FailedPrecondition("gradients: this graph has no server to ask; "
                                            "make it with client.graph()")
        if self._functions:
            raise errors.InvalidArgument("gradients: not inside a while_loop or cond function")
        single = not isinstance(xs, (list, tuple))
        xs = [xs] if single else list(xs)
        names = [self._tensor_name(x, "xs[%d]" % i) for i, x in enumerate(xs)]
        r = client.transport.gradients(self.as_dict(), self._tensor_name(y, "y"), names,
                                       prefix)
        for n in r["nodes"]:
            self._add_server_node(n)
        out = []
        for x, g in zip(xs, r["gradients"]):
            if not g:
                out.append(None)
            elif g.get("dense"):
                o = self[g["dense"]]
                o.dtype = o.dtype or getattr(x, "dtype", None)
                o.shape = o.shape if o.shape is not None else getattr(x, "shape", None)
                out.append(o)
            else:
                out.append(IndexedSlices(self[g["indices"]], self[g["values"]],
                                         self[g["dense_shape"]]))
        return out[0] if single else out

    def _tensor_name(self, t, field):
        if isinstance(t, _graph.Node):
            t = t.outputs[0] if t.outputs else t.name
        if isinstance(t, _graph.Output):
            if t.graph is not self:
                raise errors.InvalidArgument("%s: %s is of another graph" % (field, t.name),
                                             field=field)
            return t.name
        if isinstance(t, str):
            return t
        raise errors.InvalidArgument("%s: expected an Output, a node or a name, got %r"
                                     % (field, t), field=field)

    def _add_server_node(self, d):
        """A node the server made (gradients), with its outputs typed from the registry."""
        if d["name"] in self._by_name:
            raise errors.AlreadyExists("the server's node '%s' is already in the graph"
                                       % d["name"], node=d["name"])
        attrs = d.get("attrs", {})
        node = _graph.Node(self, d["name"], d["op"], d.get("inputs", []), attrs, d.get("device", ""))
        outs = []
        try:
            op = self._library.op_def(d["op"])
        except (KeyError, AttributeError):
            op = None
        for a in (op.outputs if op is not None else []):
            if a.number_attr:
                outs += [a.fixed or attrs.get(a.type_attr)] * int(attrs.get(a.number_attr, 1))
            elif a.type_list_attr:
                outs += list(attrs.get(a.type_list_attr, []))
            else:
                outs.append(a.fixed or attrs.get(a.type_attr))
        node.outputs = [_graph.Output(node, i, dt if isinstance(dt, str) else None)
                        for i, dt in enumerate(outs or [None])]
        self._nodes.append(node)
        self._by_name[node.name] = node
        return node


from . import graph as _graph  # noqa: E402 (graph.py imports this module first)
