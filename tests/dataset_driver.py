"""Loads one SNAP dataset entry given as JSON (name, url, nodes, edges) through the dataset cache,
the way any command would; prints "ready" once imported, then the loaded graph's summary."""

import json
import sys

from commgraph.graph.datasets import load_dataset
from commgraph.graph.registry import Dataset, RemoteFile, Stats

spec = json.loads(sys.argv[1])
entry = Dataset(spec["name"], "snap", (RemoteFile(spec["url"]),), "test fixture", Stats(spec["nodes"], spec["edges"]))
print("ready", flush=True)
graph = load_dataset(entry, progress=False)
print(json.dumps({"nodes": graph.num_nodes, "edges": graph.num_edges, "checksum": graph.checksum()}), flush=True)
