r"""Synthetic heterogeneous graphs a GNN can learn, shaped like real ones: :func:`mag_shaped`
(ogbn-mag) and :func:`movielens_shaped` (MovieLens-1M's users rating movies).

Every node of every type gets a hidden class; an edge joins a node to one of its own class with
probability ``homophily`` (else to any node of the other type), and within a class the endpoint
is drawn with a skew (position :math:`\lfloor n_c u^2 \rfloor`, :math:`u \sim U(0, 1)`), so
degrees are uneven, as in real graphs. Features are the class centroid plus noise, as in
:func:`~commgraph.graph.sbm`: features alone separate classes only partly, and the typed
neighbourhood (a paper's authors, fields, citations) carries the rest. Duplicate edges are dropped.
Deterministic for a seed.
"""

from __future__ import annotations

import numpy as np

from commgraph.errors import GraphSpecError
from commgraph.graph.build import split_masks, unique_sorted
from commgraph.graph.hetero import HeteroGraph, Relation

# ogbn-mag (Wang et al., "Microsoft Academic Graph", 2020; OGB's node property prediction)
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740, "field_of_study": 59_965}
MAG_RELATIONS = {
    ("author", "writes", "paper"): 7_145_660,
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078,
}
MAG_SPLIT = (629_571 / 736_389, 64_879 / 736_389)  # train, validation: OGB's time split's shares
# MovieLens-1M (Harper and Konstan, "The MovieLens Datasets", 2015)
ML_USERS, ML_ITEMS, ML_RATINGS = 6_040, 3_706, 1_000_209


def mag_shaped(
    scale: float = 1.0,
    seed: int = 0,
    features: int = 128,
    classes: int = 349,
    homophily: float = 0.8,
    noise: float = 3.0,
) -> HeteroGraph:
    """A graph shaped like ogbn-mag: papers, authors, institutions and fields of study; relations
    ``writes`` (author to paper), ``affiliated_with`` (author to institution), ``cites`` (paper to
    paper) and ``has_topic`` (paper to field), each with its reverse ``rev_<name>``; features on
    papers only; classes on papers (the target), split as OGB's time split's shares (85.5% train,
    8.8% validation, the rest test), drawn at random.

    At ``scale=1`` the counts are ogbn-mag's: 1,939,743 nodes and 21,111,007 relation edges (as
    many again reversed), less the duplicates the draws make.

    Args:
        scale: a fraction of ogbn-mag's node and edge counts (each type keeps at least one node).
        seed: the random seed.
        features: the papers' feature width.
        classes: paper classes.
        homophily: the share of edges that join nodes of one class.
        noise: the features' noise scale.

    Raises:
        GraphSpecError: a scale or an option out of range.
    """
    if not 0 < scale <= 64 or features < 1 or classes < 2 or not 0 <= homophily <= 1 or noise < 0:
        raise GraphSpecError(
            "mag-shaped needs 0 < scale <= 64, features >= 1, classes >= 2, 0 <= homophily <= 1 and noise >= 0"
        )
    rng = np.random.default_rng(seed)
    counts = {t: max(1, round(n * scale)) for t, n in MAG_NODES.items()}
    hidden = {t: rng.integers(0, classes, n) for t, n in counts.items()}
    relations = {}
    for (src, name, dst), edges in MAG_RELATIONS.items():
        draws = _Classed(hidden[dst], classes)
        s = rng.integers(0, counts[src], max(1, round(edges * scale)))
        d = draws.pick(rng, hidden[src][s], homophily)
        s, d = _distinct(s, d, counts[src])
        relations[(src, name, dst)] = Relation.from_edges(s, d, counts[dst])
        relations[(dst, f"rev_{name}", src)] = Relation.from_edges(d, s, counts[src])
    papers = counts["paper"]
    centroids = rng.standard_normal((classes, features), dtype=np.float32)
    x = centroids[hidden["paper"]] + np.float32(noise) * rng.standard_normal((papers, features), dtype=np.float32)
    train, val, test = split_masks(papers, *MAG_SPLIT, seed)
    return HeteroGraph(
        counts,
        relations,
        {"paper": x},
        target="paper",
        labels=hidden["paper"],
        train_mask=train,
        val_mask=val,
        test_mask=test,
        name=f"mag-shaped-x{scale:g}-s{seed}",
    )


def movielens_shaped(scale: float = 1.0, seed: int = 0, genres: int = 18, homophily: float = 0.7) -> HeteroGraph:
    """A bipartite graph shaped like MovieLens-1M: users rate items (``rates``, and ``rated_by``
    back), each rating 1 to 5 as the edge's one feature. An item's features are its genres
    (multi-hot, its main genre always set); a user rates items of the genre they prefer with
    probability ``homophily`` and rates them higher. No labels: the task is link prediction.

    At ``scale=1``: 6,040 users, 3,706 items and 1,000,209 ratings (less duplicate draws).

    Raises:
        GraphSpecError: a scale or an option out of range.
    """
    if not 0 < scale <= 1024 or genres < 2 or not 0 <= homophily <= 1:
        raise GraphSpecError("movielens-shaped needs 0 < scale <= 1024, genres >= 2 and 0 <= homophily <= 1")
    rng = np.random.default_rng(seed)
    users, items = max(1, round(ML_USERS * scale)), max(1, round(ML_ITEMS * scale))
    taste, genre = rng.integers(0, genres, users), rng.integers(0, genres, items)
    u = rng.integers(0, users, max(1, round(ML_RATINGS * scale)))
    i = _Classed(genre, genres).pick(rng, taste[u], homophily)
    u, i = _distinct(u, i, users)
    liked = taste[u] == genre[i]
    rating = np.clip(np.rint(3 + liked + rng.standard_normal(u.shape[0])), 1, 5).astype(np.float32)[:, None]
    x = (rng.random((items, genres)) < 2 / genres).astype(np.float32)
    x[np.arange(items), genre] = 1
    relations = {
        ("user", "rates", "item"): Relation.from_edges(u, i, items, rating),
        ("item", "rated_by", "user"): Relation.from_edges(i, u, users, rating),
    }
    return HeteroGraph(
        {"user": users, "item": items}, relations, {"item": x}, name=f"movielens-shaped-x{scale:g}-s{seed}"
    )


class _Classed:
    """Nodes of one type grouped by class, to draw endpoints of a wanted class with a skew."""

    def __init__(self, hidden: np.ndarray, classes: int):
        self.by_class = np.argsort(hidden, kind="stable")
        self.sizes = np.bincount(hidden, minlength=classes)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])

    def pick(self, rng: np.random.Generator, wanted: np.ndarray, homophily: float) -> np.ndarray:
        """One node per entry of ``wanted`` (classes): of that class with probability ``homophily``
        (where the class has nodes), else any node; skewed towards each range's first nodes."""
        count, total = wanted.shape[0], self.by_class.shape[0]
        inside = (rng.random(count) < homophily) & (self.sizes[wanted] > 0)
        skew = rng.random(count) ** 2
        start = np.where(inside, self.starts[wanted], 0)
        size = np.where(inside, self.sizes[wanted], total)
        return self.by_class[start + (skew * size).astype(np.int64)]


def _distinct(src: np.ndarray, dst: np.ndarray, num_src: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(src, dst)``, sorted by destination, then source."""
    keys = unique_sorted(dst.astype(np.int64) * num_src + src)
    return keys % num_src, keys // num_src
