"""The datasets commgraph knows by name: where each comes from, under which licence, and the
statistics its publishers give, which a loaded copy is checked against.

The upstream files are the ones PyG's and OGB's own loaders fetch: Planetoid's raw pickles from the
``kimiyoung/planetoid`` repository (PyG's ``Planetoid``), OGB's zips from
``snap.stanford.edu/ogb/data/nodeproppred/`` (``ogb``'s ``NodePropPredDataset``), Reddit's zip from
``data.dgl.ai`` (PyG's ``Reddit``), and SNAP's gzipped edge lists from ``snap.stanford.edu/data/``.
Cora stays bundled (:data:`commgraph.graph.resolve.BUNDLED`).

Statistics are compared with the graph as it loads (:func:`compare_count`): a count that disagrees
with the publisher's is a warning on stderr, never a refusal, since a page's figure is not a
checksum; only a SHA-256 of the publisher's file (``RemoteFile.sha256``, pinned where known) refuses
a download. They are counted as the publisher counts them: ``nodes`` as the loader counts them (a
SNAP header's N when every id lies in its range 0..N-1, isolated ids included, as SNAP publishes;
else the ids that occur; OGB's ``num-node-list``; Planetoid's test index range, CiteSeer's isolated
test nodes included); ``edges`` either the edge lines of the upstream file
(``edges_counted="listed"``: SNAP, OGB, Reddit) or the stored directed edges after symmetrisation
without self loops (``"stored"``: PyG's Planetoid counts); ``features``, the width of a node's
feature vector; ``classes``, the number of label classes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from commgraph.errors import GraphSpecError

KINDS = ("planetoid", "ogb", "reddit", "snap")


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file: its URL, its size in bytes where known (a mismatch is a warning), and its
    SHA-256 where known (a mismatch refuses the file; without one, the digest of the first download is
    recorded and every later use checked against it)."""

    url: str
    size: int | None = None
    sha256: str | None = None

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Stats:
    nodes: int
    edges: int
    features: int = 0
    classes: int = 0
    edges_counted: str = "listed"  # "listed": edge lines upstream; "stored": Graph.num_edges


@dataclass(frozen=True)
class Dataset:
    """A named dataset: how to fetch it (``files``), read it (``kind``; ``folder`` is the directory a
    zip unpacks to), and check it (``stats``)."""

    name: str
    kind: str
    files: tuple[RemoteFile, ...]
    licence: str
    stats: Stats
    folder: str | None = None  # the zip's top-level directory
    split: str | None = None  # OGB split scheme
    labels: bool = True  # False: the labels are not one class per node (multi-task), left out
    size_text: str = ""  # approximate download size, for `datasets list` (downloads check Content-Length)
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"dataset {self.name}: unknown kind {self.kind!r}")


_PLANETOID = "https://github.com/kimiyoung/planetoid/raw/master/data"
_OGB = "http://snap.stanford.edu/ogb/data/nodeproppred"
_SNAP = "https://snap.stanford.edu/data"
_SNAP_LICENCE = "SNAP: free for research use, cite the dataset's paper (no formal licence)"


def _planetoid(name: str, stats: Stats, size_text: str) -> Dataset:
    parts = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    return Dataset(
        name,
        "planetoid",
        tuple(RemoteFile(f"{_PLANETOID}/ind.{name}.{p}") for p in parts),
        "planetoid repository (Yang et al., 2016), MIT; citation data from LINQS",
        stats,
        size_text=size_text,
    )


def _ogb(name: str, zip_name: str, stats: Stats, licence: str, split: str, size_text: str, **kw) -> Dataset:
    return Dataset(
        name,
        "ogb",
        (RemoteFile(f"{_OGB}/{zip_name}.zip"),),
        licence,
        stats,
        folder=zip_name,
        split=split,
        size_text=size_text,
        **kw,
    )


def _snap(name: str, path: str, stats: Stats, size_text: str) -> Dataset:
    return Dataset(name, "snap", (RemoteFile(f"{_SNAP}/{path}"),), _SNAP_LICENCE, stats, size_text=size_text)


REGISTRY: dict[str, Dataset] = {
    d.name: d
    for d in (
        _planetoid("citeseer", Stats(3_327, 9_104, 3_703, 6, edges_counted="stored"), "~0.5 MB"),
        _planetoid("pubmed", Stats(19_717, 88_648, 500, 3, edges_counted="stored"), "~5 MB"),
        _ogb("ogbn-arxiv", "arxiv", Stats(169_343, 1_166_243, 128, 40), "ODC-BY", "time", "~81 MB"),
        _ogb(
            "ogbn-products",
            "products",
            Stats(2_449_029, 61_859_140, 100, 47),
            "Amazon licence",
            "sales_ranking",
            "~1.4 GB",
        ),
        _ogb(
            "ogbn-proteins",
            "proteins",
            Stats(132_534, 39_561_252),
            "CC-0",
            "species",
            "~216 MB",
            labels=False,
            notes="structure only: its 112 binary tasks are not one class per node, and its features are on edges",
        ),
        _ogb(
            "ogbn-papers100M",
            "papers100M-bin",
            Stats(111_059_956, 1_615_685_872, 128, 172),
            "ODC-BY",
            "time",
            "~56 GB",
            notes="needs far more memory than the edge list alone (node_feat is 111M x 128)",
        ),
        Dataset(
            "reddit",
            "reddit",
            (RemoteFile("https://data.dgl.ai/dataset/reddit.zip"),),
            "no formal licence (Hamilton et al., 2017, GraphSAGE; research use)",
            Stats(232_965, 114_615_892, 602, 41),
            size_text="~1.9 GB",
        ),
        _snap("email-Enron", "email-Enron.txt.gz", Stats(36_692, 367_662), "~1 MB"),
        _snap("web-Google", "web-Google.txt.gz", Stats(875_713, 5_105_039), "~21 MB"),
        _snap("soc-LiveJournal1", "soc-LiveJournal1.txt.gz", Stats(4_847_571, 68_993_773), "~250 MB"),
        _snap("com-orkut", "bigdata/communities/com-orkut.ungraph.txt.gz", Stats(3_072_441, 117_185_083), "~450 MB"),
        _snap(
            "com-friendster",
            "bigdata/communities/com-friendster.ungraph.txt.gz",
            Stats(65_608_366, 1_806_067_135),
            "~8.7 GB",
        ),
    )
}


def lookup(name: str) -> Dataset:
    try:
        return REGISTRY[name]
    except KeyError:
        raise GraphSpecError(f"no dataset named {name!r}; known: {', '.join(REGISTRY)}") from None


def compare_count(source: str, what: str, counted: int, stated: int, stated_by: str) -> bool:
    """Compare a count made on the data with the one ``stated_by`` gives (a publisher's page, a file's
    header). A disagreement is one warning line on stderr and never an error: a stated count is not
    a checksum. Returns True when they agree."""
    if counted == stated:
        return True
    print(
        f"commgraph: warning: {source}: counted {counted:,} {what} where {stated_by} states {stated:,}; "
        "kept as counted (a stated count is not a checksum)",
        file=sys.stderr,
    )
    return False
