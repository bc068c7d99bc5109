"""Synthetic graphs, deterministic for a seed: RMAT (power-law structure, for scale) and a
stochastic block model with class-correlated features (for checking that training really learns).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from commgraph.errors import GraphSpecError
from commgraph.graph.build import from_edges, split_masks, unique_sorted
from commgraph.graph.chunked import ChunkedGraph
from commgraph.graph.core import Graph
from commgraph.graph.npz import load_npz
from commgraph.graph.sbm_chunked import sbm_chunks, write_sbm_chunked
from commgraph.sizes import check_count, check_room

_MAX_ROUNDS = 64
_BLOCK_ROWS = 1 << 14  # rows of a Gaussian feature table drawn by one generator
_FEATURE_STREAM = 1  # the features' seed sequence is (seed, this): apart from the structure's


def rmat(
    nodes: int,
    edges: int,
    seed: int = 0,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    features: int = 0,
    classes: int = 0,
) -> Graph:
    """An R-MAT power-law graph from `"R-MAT: A Recursive Model for Graph Mining"
    <https://doi.org/10.1137/1.9781611972740.43>`_ (Chakrabarti, Zhan and Faloutsos, SDM 2004),
    with Graph500's quadrant probabilities by default.

    Each edge picks one quadrant of the adjacency matrix per bit of the node id, with probabilities
    ``a``, ``b``, ``c`` and ``d = 1 - a - b - c``. Draws outside ``0..nodes-1``, self loops and repeats
    are discarded and more are drawn until exactly ``edges`` distinct undirected edges remain; the
    graph is symmetrised (so ``num_edges == 2 * edges``). Node ids are randomly permuted, as in
    Graph500, so that id order carries no locality. Deterministic for a seed.

    Args:
        nodes: node count ``N``.
        edges: distinct undirected edges, at most ``N (N - 1) / 2``.
        seed: the random seed.
        a, b, c: quadrant probabilities (``a > 0``, ``b, c >= 0``, ``a + b + c < 1``).
        features: if > 0, standard normal features of this width (:func:`gaussian_table`).
        classes: if > 0, uniformly random labels and a random 10/10/80 train/val/test split: a
            graph for throughput runs, not for accuracy (use :func:`sbm` for that).

    Returns:
        Graph: named ``rmat-N-M-sS`` (plus any non-default option).

    Raises:
        GraphSpecError: bad sizes or probabilities, or more edges than the nodes can hold.
    """
    _check_positive(nodes=nodes, edges=edges)
    if not (a > 0 and b >= 0 and c >= 0 and a + b + c < 1):
        raise GraphSpecError(f"rmat needs a > 0, b, c >= 0 and a + b + c < 1; got {a}, {b}, {c}")
    if edges > nodes * (nodes - 1) // 2:
        raise GraphSpecError(f"{nodes} nodes hold at most {nodes * (nodes - 1) // 2} edges, not {edges}")
    check_count("rmat: nodes x nodes (its edge keys)", nodes * nodes, GraphSpecError)
    _check_size("rmat", nodes, edges, features)
    rng = np.random.default_rng(seed)
    scale = max(1, int(np.ceil(np.log2(nodes))))
    keys = np.empty(0, dtype=np.int64)
    for _ in range(_MAX_ROUNDS):
        missing = edges - keys.shape[0]
        if missing <= 0:
            break
        src, dst = _rmat_sample(rng, int(missing * 1.15) + 1024, scale, a, b, c)
        ok = (src < nodes) & (dst < nodes) & (src != dst)
        lo, hi = np.minimum(src[ok], dst[ok]), np.maximum(src[ok], dst[ok])
        keys = unique_sorted(np.concatenate([keys, lo * nodes + hi]))
    else:
        raise GraphSpecError(f"rmat could not place {edges} distinct edges among {nodes} nodes; ask for fewer edges")
    keys = rng.permutation(keys)[:edges]
    relabel = rng.permutation(nodes)
    src, dst = relabel[keys // nodes], relabel[keys % nodes]
    node_data = {}
    if features:
        node_data["features"] = gaussian_table(seed, nodes, features)
    if classes:
        node_data["labels"] = rng.integers(0, classes, nodes)
        node_data.update(zip(("train_mask", "val_mask", "test_mask"), split_masks(nodes, 0.1, 0.1, seed)))
    name = f"rmat-{nodes}-{edges}-s{seed}" + _non_default(rmat, a=a, b=b, c=c, features=features, classes=classes)
    return from_edges(src, dst, nodes, symmetrize=True, name=name, **node_data)


def gaussian_table(seed: int, rows: int, width: int) -> np.ndarray:
    """A ``[rows, width]`` float32 table of standard normal draws, the same for a ``seed`` on any
    machine, drawn on every core: each block of ``_BLOCK_ROWS`` rows has a generator of its own
    (``SeedSequence.spawn``), so the values do not depend on the number of threads, and numpy's
    generators fill their blocks without holding the GIL."""
    table = np.empty((rows, width), dtype=np.float32)
    starts = range(0, rows, _BLOCK_ROWS)
    seeds = np.random.SeedSequence([seed, _FEATURE_STREAM]).spawn(len(starts))

    def fill(start: int, block_seed: np.random.SeedSequence) -> None:
        np.random.default_rng(block_seed).standard_normal(out=table[start : start + _BLOCK_ROWS], dtype=np.float32)

    with ThreadPoolExecutor(max(1, min(len(starts), len(os.sched_getaffinity(0))))) as pool:
        list(pool.map(fill, starts, seeds))
    return table


def _rmat_sample(rng: np.random.Generator, count: int, scale: int, a: float, b: float, c: float):
    """``count`` edges of a 2^scale RMAT: one quadrant choice per bit level, all edges at once."""
    src = np.zeros(count, dtype=np.int64)
    dst = np.zeros(count, dtype=np.int64)
    for level in range(scale):
        r = rng.random(count)
        bit = np.int64(1) << level
        src += (r >= a + b).astype(np.int64) * bit  # quadrants c and d: lower half
        dst += (((r >= a) & (r < a + b)) | (r >= a + b + c)).astype(np.int64) * bit  # b and d
    return src, dst


def sbm(
    nodes: int,
    classes: int,
    features: int,
    seed: int = 0,
    degree: float = 10.0,
    homophily: float = 0.8,
    noise: float = 3.0,
    train: float = 0.1,
    val: float = 0.1,
    chunked: int = 0,
) -> Graph:
    r"""A stochastic block model (Holland, Laskey and Leinhardt, `"Stochastic blockmodels: First
    steps" <https://doi.org/10.1016/0378-8733(83)90021-7>`_, 1983) whose labels a GNN can learn.

    Nodes fall into ``classes`` equal-sized blocks (their labels). About ``N * degree / 2`` edges
    are drawn, a fraction ``homophily`` of them inside a block, then symmetrised. A node's features
    are its class centroid plus noise,

    .. math::
        \mathbf{x}_i = \boldsymbol{\mu}_{y_i} + \sigma \boldsymbol{\epsilon}_i, \qquad
        \boldsymbol{\mu}_c, \boldsymbol{\epsilon}_i \sim \mathcal{N}(0, I_F),

    with :math:`\sigma` = ``noise``, so features alone separate classes only partly and aggregating
    neighbours helps, as on citation graphs. Deterministic for a seed.

    Args:
        nodes: node count ``N``.
        classes: blocks (classes) ``C``, at most ``N``.
        features: feature width ``F``.
        seed: the random seed.
        degree: the average degree wanted.
        homophily: the fraction of edges inside a block, in ``[0, 1]``.
        noise: the features' noise scale :math:`\sigma`.
        train, val: fractions of nodes in the random train and validation masks (the rest test).
        chunked: 1 writes the graph a chunk of nodes at a time to the dataset cache
            (``$COMMGRAPH_HOME/datasets/sbm-chunked/``) and maps it, never holding it: the same
            model drawn otherwise, not this generator's graph for the seed
            (:mod:`commgraph.graph.sbm_chunked`), for graphs larger than memory.

    Returns:
        Graph: with features, labels and a split.

    Raises:
        GraphSpecError: non-positive sizes, more classes than nodes, or out-of-range options.
    """
    name, homophily = _sbm_checked(nodes, classes, features, seed, degree, homophily, noise, train, val)
    if chunked:
        return _sbm_chunked(name, nodes, classes, features, seed, degree, homophily, noise, train, val)
    samples = max(1, int(round(nodes * degree / 2)))
    _check_size("sbm", nodes, samples, features)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(nodes) % classes)
    by_class = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels, minlength=classes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    src = rng.integers(0, nodes, samples)
    inside = rng.random(samples) < homophily
    target_class = np.where(inside, labels[src], (labels[src] + rng.integers(1, max(classes, 2), samples)) % classes)
    dst = by_class[starts[target_class] + (rng.random(samples) * sizes[target_class]).astype(np.int64)]

    centroids = rng.standard_normal((classes, features), dtype=np.float32)
    x = centroids[labels] + np.float32(noise) * rng.standard_normal((nodes, features), dtype=np.float32)
    masks = split_masks(nodes, train, val, seed)
    return from_edges(
        src,
        dst,
        nodes,
        symmetrize=True,
        features=x,
        labels=labels,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name=name,
    )


def _sbm_checked(nodes, classes, features, seed, degree, homophily, noise, train, val) -> tuple[str, float]:
    """The name of ``sbm``'s graph for these options, and the homophily it draws with; options out
    of range are refused (:func:`sbm`'s Raises)."""
    _check_positive(nodes=nodes, classes=classes, features=features)
    if classes > nodes:
        raise GraphSpecError(f"sbm needs at least one node per class: {classes} classes > {nodes} nodes")
    if not 0 <= homophily <= 1 or degree <= 0 or noise < 0:
        raise GraphSpecError("sbm needs 0 <= homophily <= 1, degree > 0 and noise >= 0")
    if classes == 1 and homophily < 1:
        homophily = 1.0  # a single block has no other block to link to
    name = f"sbm-{nodes}-c{classes}-f{features}-s{seed}" + _non_default(
        sbm, degree=degree, homophily=homophily, noise=noise, train=train, val=val
    )
    return name, homophily


def sbm_chunked_graph(
    nodes: int,
    classes: int,
    features: int,
    seed: int = 0,
    degree: float = 10.0,
    homophily: float = 0.8,
    noise: float = 3.0,
    train: float = 0.1,
    val: float = 0.1,
    chunked: int = 0,
) -> ChunkedGraph | None:
    """``sbm(..., chunked=1)``'s graph as a :class:`~commgraph.graph.chunked.ChunkedGraph` (the
    same name and draws, a chunk at a time); None without ``chunked`` (that graph is drawn whole).

    Raises:
        GraphSpecError: as :func:`sbm`.
    """
    if not chunked:
        return None
    name, homophily = _sbm_checked(nodes, classes, features, seed, degree, homophily, noise, train, val)
    return sbm_chunks(nodes, classes, features, seed, degree, homophily, noise, train, val, name=f"{name}-chunked")


def _sbm_chunked(name: str, nodes: int, classes: int, features: int, *options) -> Graph:
    """The chunked SBM named ``name``, written once to the dataset cache and mapped from there."""
    from commgraph.graph.datasets import dataset_dir

    path = dataset_dir("sbm-chunked") / f"{name}.npz"
    if not path.is_file():
        write_sbm_chunked(path, nodes, classes, features, *options, name=f"{name}-chunked")
    return load_npz(path)


def _non_default(generator: Callable, **values: float) -> str:
    """Name suffix for the parameters that differ from ``generator``'s defaults, so that two
    different graphs never share a name."""
    defaults = inspect.signature(generator).parameters
    return "".join(f"-{key}{value:g}" for key, value in values.items() if value != defaults[key].default)


# bytes a generator's graph takes at its peak, about: per node its features (float32), label,
# masks and CSR offset; per edge drawn its two ends as drawn, sorted, symmetrised and stored
NODE_BYTES, FEATURE_BYTES, EDGE_BYTES = 27, 4, 64


def _check_size(kind: str, nodes: int, edges: int, features: int) -> None:
    """Refuse a graph whose node count is beyond int64 or whose arrays would not fit in memory,
    before any is allocated."""
    check_count(f"{kind}: nodes", nodes, GraphSpecError)
    check_room(
        f"{kind} with {nodes:,} nodes and about {edges:,} edges",
        nodes * (NODE_BYTES + FEATURE_BYTES * features) + EDGE_BYTES * edges,
        GraphSpecError,
        "ask for fewer nodes, edges or features",
    )


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise GraphSpecError(f"{key} must be >= 1, got {value}")
