"""Control flow for Graph: while_loop and cond build the compact While and If nodes.

The Python functions of a loop or a conditional run on new "arg" Outputs
while the graph is in a function mode: the nodes they make go into the
function's node list, named uniquely against the graph and every enclosing
function (the server resolves a name innermost first: args, the function's
nodes, the enclosing function's, the graph's). The compact node carries the
functions as the server's JSON form takes them (README, "Conditionals and
loops"); the server lowers them to Switch/Merge/Enter/Exit/NextIteration.
"""

from . import errors


class _Function:
    """A While's cond or body, an If's branch, while its Python function runs."""

    def __init__(self):
        self.args = []
        self.nodes = []
        self.names = set()


class ControlFlowMixin:
    """Graph's while_loop and cond (the Graph supplies nodes, names and scopes)."""

    def _as_output(self, v, what):
        from .graph import Node, Output  # graph.py imports this module
        if isinstance(v, Node):
            if not v.outputs:
                raise errors.InvalidArgument("%s: node '%s' has no outputs" % (what, v.name))
            v = v.outputs[0]
        if isinstance(v, Output):
            return v
        return self.constant(v)

    def _call_function(self, fn_kind, fn, args):
        """Runs the Python function `fn` on new args; returns (function dict, results)."""
        from .graph import Node, Output
        f = _Function()
        for i, a in enumerate(args):
            name = self.unique_name("%s_arg%d" % (fn_kind, i))
            f.names.add(name)
            node = Node(self, name, "_FunctionArg", [], {})
            node.outputs = [Output(node, 0, a.dtype, a.shape)]
            f.args.append(node.outputs[0])
        saved = (self._scope, self._control, self._devices)
        self._scope, self._control = [], []
        self._functions.append(f)
        try:
            results = fn(*f.args)
            if isinstance(results, (Output, Node)) or not isinstance(results, (list, tuple)):
                results = [results]
            results = [self._as_output(r, "%s result %d" % (fn_kind, i))
                       for i, r in enumerate(results)]
        finally:
            self._functions.pop()
            self._scope, self._control, self._devices = saved
        doc = {"args": [a.name for a in f.args], "nodes": [n.to_dict() for n in f.nodes]}
        return doc, results

    def while_loop(self, cond, body, loop_vars, parallel_iterations=10, name="while"):
        """A compact While node: runs body(*vars) while cond(*vars); the final vars.

        cond returns a bool scalar, body one tensor per loop variable (its
        dtype); both may use graph nodes (loop invariants). Returns the
        node's outputs, one per loop variable ("<name>:k"). Gradients flow
        through it in a job's training graph.
        """
        loop_vars = [self._as_output(v, "loop_vars[%d]" % i) for i, v in enumerate(loop_vars)]
        if not loop_vars:
            raise errors.InvalidArgument("while_loop needs at least one loop variable",
                                         field="loop_vars")
        cond_doc, cond_out = self._call_function("cond", cond, loop_vars)
        if len(cond_out) != 1:
            raise errors.InvalidArgument("while_loop's cond returns one bool tensor, got %d"
                                         % len(cond_out), field="cond")
        if cond_out[0].dtype not in (None, "bool"):
            raise errors.InvalidArgument("while_loop's cond returns a bool, got %s"
                                         % cond_out[0].dtype, field="cond")
        cond_doc["output"] = cond_out[0].name
        body_doc, body_out = self._call_function("body", body, loop_vars)
        if len(body_out) != len(loop_vars):
            raise errors.InvalidArgument("while_loop's body returns %d tensors for %d loop "
                                         "variables"
                                         % (len(body_out), len(loop_vars)), field="body")
        for i, (v, o) in enumerate(zip(loop_vars, body_out)):
            if v.dtype and o.dtype and v.dtype != o.dtype:
                raise errors.InvalidArgument("while_loop's body result %d is %s, loop variable %d "
                                             "is %s"
                                             % (i, o.dtype, i, v.dtype), field="body")
        body_doc["outputs"] = [o.name for o in body_out]
        node = self.add_node("While", [], {}, name=name,
                             output_dtypes=[v.dtype for v in loop_vars],
                             output_shapes=[v.shape for v in loop_vars])
        node.extra = {"loop_vars": [v.name for v in loop_vars],
                      "parallel_iterations": int(parallel_iterations),
                      "cond": cond_doc, "body": body_doc}
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    def cond(self, pred, then_fn, else_fn, inputs=(), name="cond"):
        """A compact If node: then_fn(*inputs) when pred is true, else else_fn(*inputs).

        Both return as many tensors, pairwise of one dtype; the untaken branch
        never runs. Returns the node's outputs ("<name>:k").
        """
        pred = self._as_output(pred, "pred")
        inputs = [self._as_output(v, "inputs[%d]" % i) for i, v in enumerate(inputs)]
        then_doc, then_out = self._call_function("then", then_fn, inputs)
        else_doc, else_out = self._call_function("else", else_fn, inputs)
        if len(then_out) != len(else_out):
            raise errors.InvalidArgument("cond's branches return %d and %d tensors"
                                         % (len(then_out), len(else_out)), field="else")
        for i, (a, b) in enumerate(zip(then_out, else_out)):
            if a.dtype and b.dtype and a.dtype != b.dtype:
                raise errors.InvalidArgument("cond's result %d is %s in then, %s in else"
                                             % (i, a.dtype, b.dtype), field="else")
        then_doc["outputs"] = [o.name for o in then_out]
        else_doc["outputs"] = [o.name for o in else_out]
        node = self.add_node("If", [], {}, name=name,
                             output_dtypes=[a.dtype or b.dtype for a, b in zip(then_out, else_out)])
        node.extra = {"pred": pred.name, "inputs": [v.name for v in inputs],
                      "then": then_doc, "else": else_doc}
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

