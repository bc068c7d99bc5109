"""Turning what a user types (``cora``, ``ogbn-arxiv``, ``rmat:nodes=1000,edges=5000``, a path)
into a Graph."""

from __future__ import annotations

import inspect
from importlib import resources
from pathlib import Path

from commgraph.errors import GraphFormatError, GraphSpecError
from commgraph.graph.chunked import ChunkedGraph
from commgraph.graph.core import Graph
from commgraph.graph.datasets import load_dataset
from commgraph.graph.hetero import HeteroGraph
from commgraph.graph.hetero_synthetic import mag_shaped, movielens_shaped
from commgraph.graph.npz import load_npz
from commgraph.graph.ogb import is_ogb_dir, is_ogb_hetero_dir, load_ogb, load_ogb_hetero
from commgraph.graph.papers import papers_chunks, papers_shaped
from commgraph.graph.planetoid import find_planetoid, load_planetoid
from commgraph.graph.registry import REGISTRY
from commgraph.graph.snap import SUFFIXES as SNAP_SUFFIXES
from commgraph.graph.snap import load_snap
from commgraph.graph.synthetic import rmat, sbm, sbm_chunked_graph

BUNDLED = {"cora": "cora.npz"}
GENERATORS = {
    "rmat": rmat,
    "sbm": sbm,
    "mag-shaped": mag_shaped,
    "movielens-shaped": movielens_shaped,
    "papers-shaped": papers_shaped,
}
FORMATS = ("snap", "ogb", "planetoid", "npz")
CHUNKED = {"papers-shaped": papers_chunks, "sbm": sbm_chunked_graph}  # generators drawn a chunk at a time


def chunked_graph(spec: str | Path) -> ChunkedGraph | None:
    """The graph a synthetic spec drawn a chunk at a time names (``papers-shaped:...``,
    ``sbm:...,chunked=1``), as a :class:`~commgraph.graph.chunked.ChunkedGraph` that is not
    drawn yet; None for any other GRAPH (a name, a path, another generator).

    Raises:
        GraphSpecError: a spec of one of these generators with bad options.
    """
    text = str(spec)
    kind, colon, params = text.partition(":")
    if not colon or kind not in CHUNKED or Path(text).exists():
        return None
    return CHUNKED[kind](**_parse_params(kind, params))


def load_graph(
    spec: str | Path,
    *,
    format: str | None = None,
    name: str | None = None,
    split: str | None = None,
    directed: bool = False,
) -> Graph | HeteroGraph:
    """The graph a GRAPH argument names: what every ``commgraph`` command that reads a graph calls.

    In this order, ``spec`` is a bundled graph (``cora``, offline), a registry dataset
    (``ogbn-arxiv``, ``reddit``, ``web-Google``, ...: downloaded, verified and converted once, see
    :mod:`commgraph.graph.datasets`), a synthetic spec ``kind:key=value,...`` (``rmat:`` gives
    :func:`~commgraph.graph.rmat`'s arguments, ``sbm:`` :func:`~commgraph.graph.sbm`'s; the
    heterogeneous ``mag-shaped:`` and ``movielens-shaped:`` give a :class:`HeteroGraph`), or a file
    or directory whose format is detected from the path: a SNAP edge list (``.txt``, ``.txt.gz``,
    ...), an OGB directory, Planetoid files, or commgraph's ``.npz``.

    Args:
        spec: the name, spec or path.
        format: force a format (one of :data:`FORMATS`: ``snap``, ``ogb``, ``planetoid``, ``npz``)
            instead of detecting it.
        name: the graph's name; also picks the dataset inside a Planetoid folder.
        split: the split scheme of an OGB directory that has several.
        directed: keep a SNAP file's edges one-way (other sources are taken as they are stored or
            generated; the default symmetrises, as training expects).

    Returns:
        Graph | HeteroGraph: validated, duplicate edges removed, self loops dropped.

    Raises:
        GraphSpecError: ``spec`` is no known name, no valid synthetic spec and no existing path.
        GraphFormatError: the file or directory cannot be read in its format (names the file and
            line at fault).
    """
    text = str(spec)
    if format is None and text in BUNDLED:
        graph = load_npz(resources.files("commgraph.graph.data") / BUNDLED[text])
        return graph if name is None else _renamed(graph, name)
    if format is None and text in REGISTRY and not Path(text).exists():
        graph = load_dataset(text)
        return graph if name is None else _renamed(graph, name)
    kind, colon, params = text.partition(":")
    if format is None and colon and kind in GENERATORS and not Path(text).exists():
        graph = GENERATORS[kind](**_parse_params(kind, params))
        return graph if name is None else _renamed(graph, name)
    return _load_path(Path(text), format, name, split, directed)


def _load_path(path: Path, format: str | None, name: str | None, split: str | None, directed: bool) -> Graph:
    if format is not None and format not in FORMATS:
        raise GraphSpecError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if not path.exists() and find_planetoid(path, name) is None:
        raise GraphSpecError(
            f"{str(path)!r} is not a bundled graph ({', '.join(BUNDLED)}), a dataset name "
            f"(commgraph graph datasets list), a synthetic spec "
            f"(e.g. rmat:nodes=1000,edges=10000,seed=0 or sbm:nodes=1000,classes=4,features=16) "
            f"nor an existing path"
        )
    format = format or _detect(path, name)
    if format == "snap":
        return load_snap(path, name=name, symmetrize=not directed)
    if format == "npz":
        return load_npz(path, name=name)
    if format == "ogb" and is_ogb_hetero_dir(path):
        return load_ogb_hetero(path, name=name, split=split)
    if format == "ogb":
        return load_ogb(path, name=name, split=split)
    found = find_planetoid(path, name)
    if found is None:
        raise GraphFormatError(
            path,
            "no Planetoid files ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index} found"
            + ("" if name else "; if the folder holds several datasets, pick one with --name"),
        )
    return load_planetoid(*found)


def _detect(path: Path, name: str | None) -> str:
    if path.is_dir():
        if is_ogb_dir(path) or is_ogb_hetero_dir(path):
            return "ogb"
        if find_planetoid(path, name) is not None:
            return "planetoid"
        raise GraphFormatError(
            path,
            "is a directory in no known format: expected an OGB dataset (raw/edge.csv.gz, or "
            "raw/num-node-dict.csv.gz for a heterogeneous one) "
            "or Planetoid files (ind.<name>.*); pass --format to force one",
        )
    if path.name.endswith(".npz"):
        return "npz"
    if path.name.endswith(SNAP_SUFFIXES):
        return "snap"
    if find_planetoid(path, name) is not None:
        return "planetoid"
    raise GraphFormatError(path, f"cannot tell the format from the name; pass --format ({', '.join(FORMATS)})")


def _parse_params(kind: str, text: str) -> dict:
    """``nodes=1000,edges=5000`` -> keyword arguments typed by the generator's signature."""
    parameters = inspect.signature(GENERATORS[kind]).parameters
    params: dict = {}
    for item in filter(None, text.split(",")):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or key not in parameters:
            raise GraphSpecError(
                f"bad {kind} parameter {item!r}; expected key=value with key in {', '.join(parameters)}"
            )
        params[key] = _number(kind, key, value, parameters[key].annotation)
    missing = [k for k, p in parameters.items() if p.default is inspect.Parameter.empty and k not in params]
    if missing:
        raise GraphSpecError(
            f"{kind} spec is missing {', '.join(missing)} (e.g. {kind}:" + ",".join(f"{k}=..." for k in missing) + ")"
        )
    return params


def _number(kind: str, key: str, value: str, annotation: str) -> int | float:
    """Parse ``1000``, ``1e6`` or ``0.8``; integer parameters refuse fractions."""
    try:
        number = float(value)
    except ValueError:
        raise GraphSpecError(f"{kind} parameter {key} must be a number, got {value!r}") from None
    if annotation == "float":
        return number
    if not number.is_integer():
        raise GraphSpecError(f"{kind} parameter {key} must be an integer, got {value!r}")
    return int(number)


def _renamed(graph: Graph, name: str) -> Graph:
    graph.name = name
    return graph
