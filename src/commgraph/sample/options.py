"""The samplers' names and options, light to import (no torch): a command's parser and its checks
before any worker starts use them."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import SamplingError

SAMPLERS = ("neighbor", "fastgcn", "ladies", "cluster", "dgs")
FEATURE_RATE = 0.85  # N_f: the share of feature columns remote nodes send (thesis 3.4)
EPSILON = 0.1  # the deviation between local and remote counts, a share of the fanout
RULES = ("keep-local", "split")  # what DGS does with local neighbours (see DGSSampler)
EXPLAIN_IN = ("process", "worker")  # where DGS's online explainer runs (see sample.explain)
STRUCTURES = ("replicated", "partitioned")  # a machine's in-edges (see commgraph.sample.partitioned)


EdgeType = tuple[str, str, str]
RELATION_FANOUTS = "SRC__REL__DST=K,K;SRC__REL__DST=K,K;..."  # --fanout's form per relation


def parse_fanouts(text: str | list[int], layers: int | None = None) -> list[int] | dict[EdgeType, list[int]]:
    """``"10,5"`` -> ``[10, 5]``: the neighbours drawn per destination at hop 1 (the seeds'
    neighbours, read by the last layer), hop 2, ...; ``-1`` takes every neighbour. Per relation of
    a typed graph, ``"author__writes__paper=10,5;paper__cites__paper=15,10"`` (relations named as
    ``partition info`` and PyG's string keys name them, ``;`` between them) -> ``{("author",
    "writes", "paper"): [10, 5], ("paper", "cites", "paper"): [15, 10]}``; which relations it must
    name is :func:`relation_fanouts`' check, against the graph's.

    Raises:
        SamplingError: values that are not integers >= 1 or -1, a count other than ``layers``, or a
            relation not written ``src__rel__dst`` or named twice.
    """
    if isinstance(text, str) and "=" in text:
        return _per_relation(text, layers)
    try:
        fanouts = [int(part) for part in text.split(",")] if isinstance(text, str) else [int(f) for f in text]
    except ValueError:
        raise SamplingError(
            f"--fanout must be integers separated by commas, such as 10,5 (or {RELATION_FANOUTS}); got {text!r}"
        ) from None
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise SamplingError(f"--fanout needs one value per layer, each >= 1 or -1 (all); got {text!r}")
    if layers is not None and len(fanouts) != layers:
        raise SamplingError(
            f"--fanout gives {len(fanouts)} values but the model has --layers {layers}: give one per layer"
        )
    return fanouts


def _per_relation(text: str, layers: int | None) -> dict[EdgeType, list[int]]:
    """``--fanout``'s per-relation form (:func:`parse_fanouts`)."""
    fanouts: dict[EdgeType, list[int]] = {}
    for entry in filter(None, (piece.strip() for piece in text.split(";"))):
        name, _, values = entry.partition("=")
        relation = tuple(name.strip().split("__"))
        if len(relation) != 3 or not all(relation) or not values.strip():
            raise SamplingError(f"--fanout takes {RELATION_FANOUTS} per relation; got {entry!r}")
        if relation in fanouts:
            raise SamplingError(f"--fanout names relation {name.strip()} twice: give each relation once")
        try:
            fanouts[relation] = parse_fanouts(values.strip(), layers)
        except SamplingError as error:
            raise SamplingError(f"{error} (relation {name.strip()})") from None
    lengths = {len(hops) for hops in fanouts.values()}
    if len(lengths) > 1:
        raise SamplingError(f"--fanout gives lists of {sorted(lengths)} hops: give every relation one per layer")
    return fanouts


def relation_name(edge_type: EdgeType) -> str:
    """``("author", "writes", "paper")`` -> ``"author__writes__paper"`` (PyG's string key)."""
    return "__".join(edge_type)


def relation_fanouts(
    fanouts: list[int] | dict, edge_types: list[EdgeType], name: str = "--fanout", error: type = SamplingError
) -> dict[EdgeType, list[int]]:
    """One list of fanouts per relation of ``edge_types``, in their order: a list is every
    relation's; a dict (keyed ``(src, rel, dst)``) names each relation once, with lists of one
    length.

    Raises:
        error: a dict naming relations the graph lacks, or missing some of its relations (each
            named, as ``src__rel__dst``), or lists of different lengths (``name``: the option).
    """
    if not isinstance(fanouts, dict):
        return {edge_type: list(fanouts) for edge_type in edge_types}
    unknown = [key for key in fanouts if key not in edge_types]
    if unknown:
        raise error(
            f"{name} names relation{'s' * (len(unknown) > 1)} {_shown(unknown)} but the graph has none such: "
            f"its relations are {_shown(edge_types)}"
        )
    missing = [edge_type for edge_type in edge_types if edge_type not in fanouts]
    if missing:
        raise error(
            f"{name} has no fanouts for relation{'s' * (len(missing) > 1)} {_shown(missing)}: give every relation "
            "its list (or one list for all relations)"
        )
    lengths = {len(hops) for hops in fanouts.values()}
    if len(lengths) > 1:
        raise error(
            f"{name} gives lists of {sorted(lengths)} hops: give every relation one fanout per layer, "
            "the same number of hops"
        )
    return {edge_type: list(fanouts[edge_type]) for edge_type in edge_types}


def format_fanouts(fanouts: list[int] | dict[EdgeType, list[int]]) -> str:
    """Fanouts as ``--fanout`` writes them: ``10,5``, or ``src__rel__dst=10,5;...`` per relation."""
    if not isinstance(fanouts, dict):
        return ",".join(map(str, fanouts))
    return ";".join(f"{relation_name(r)}={format_fanouts(hops)}" for r, hops in fanouts.items())


def _shown(keys) -> str:
    """Relations as ``src__rel__dst``, other keys as their repr, separated by commas."""
    return ", ".join(relation_name(k) if isinstance(k, tuple) else repr(k) for k in keys)


def hop_fanouts(fanouts: list[int] | dict[EdgeType, list[int]]) -> tuple[int, ...]:
    """Per hop, one fanout standing for every relation's (what the estimates read): the list's, or
    the relations' mean (rounded up; -1 if any relation takes every neighbour at that hop)."""
    if not isinstance(fanouts, dict):
        return tuple(fanouts)
    hops = list(zip(*fanouts.values(), strict=True))
    return tuple(-1 if min(h) < 0 else -(-sum(h) // len(h)) for h in hops)


@dataclass(frozen=True)
class ExplainerOptions:
    """The thesis's defaults (section 3.4): explain every ``period`` (T_ex) training iterations,
    for at most ``epochs`` (T_E) GNNExplainer epochs, stopping once its loss is at most
    ``loss_threshold`` (L); ``lr`` is GNNExplainer's learning rate."""

    period: int = 30
    epochs: int = 50
    loss_threshold: float = 0.01
    lr: float = 0.01

    def __post_init__(self) -> None:
        if self.period < 1:
            raise SamplingError(f"--explain-period (T_ex) must be >= 1; got {self.period}")
        if self.epochs < 1:
            raise SamplingError(f"--explain-epochs must be >= 1; got {self.epochs}")
        if self.loss_threshold < 0:
            raise SamplingError(f"--explain-loss-threshold must be >= 0; got {self.loss_threshold}")
        if self.lr <= 0:
            raise SamplingError(f"the explainer's learning rate must be > 0; got {self.lr}")


# DGS's explanation graph (sample.explain.ExplanationGraph): a part's neighbourhood of at most
# EXPLAIN_NODES nodes is explained whole; a larger one links a uniform sample of EXPLAIN_NODES of its
# remote nodes to the pooled node, and predicts EXPLAIN_TARGETS of the part's nodes, each on its
# neighbourhood drawn with the training fanouts, for the class it explains
EXPLAIN_NODES = 8192
EXPLAIN_TARGETS = 8
