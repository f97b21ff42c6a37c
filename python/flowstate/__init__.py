"""flowstate: the Python client of the Flowstate training service.

    import flowstate
    client = flowstate.Client("grpc://127.0.0.1:50051")   # or "http://127.0.0.1:8080"

- ``client.graph()``: a Graph whose methods are the server's ops, generated
  from its registry (flowstate.ops), with name scopes, placeholders and
  Variables with initializers;
- ``client.session(graph)``: ``s.run(fetches, feed_dict)`` with numpy in and out;
- ``client.jobs``: submit, list, get, watch, pause, resume, cancel, delete,
  predict, history, checkpoints, export;
- ``client.datasets``: numpy arrays uploaded for jobs (``"format": "npy"``);
- ``client.models``: ONNX models uploaded for jobs; ``job.export_onnx()``;
- ``flowstate.errors``: one exception class per server error code.
"""

from . import dtypes, errors, layers
from .client import Client, Job, Jobs, Session
from .datasets import Dataset, Datasets
from .gradients import IndexedSlices
from .graph import Graph, Node, Output, get_default_graph
from .model import History, Sequential
from .ops import OpLibrary
from .messages import Event

__version__ = "0.1.0"

__all__ = ["Client", "Session", "Job", "Jobs", "Dataset", "Datasets", "Event", "Graph", "Node", "Output", "OpLibrary",
           "get_default_graph", "IndexedSlices", "Sequential", "History", "dtypes", "errors", "layers",
           "__version__"]
