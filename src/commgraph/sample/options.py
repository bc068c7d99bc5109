"""The samplers' names and options, light to import (no torch): a command's parser and its checks
before any worker starts use them."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import SamplingError

FEATURE_RATE = 0.85  # N_f: the share of feature columns remote nodes send (thesis 3.4)
EPSILON = 0.1  # the deviation between local and remote counts, a share of the fanout
RULES = ("keep-local", "split")  # what DGS does with local neighbours (see DGSSampler)
EXPLAIN_IN = ("process", "worker")  # where DGS's online explainer runs (see sample.explain)
STRUCTURES = ("replicated", "partitioned")  # a machine's in-edges (see commgraph.sample.partitioned)


EdgeType = tuple[str, str, str]
RELATION_FANOUTS = "SRC__REL__DST=K,K;SRC__REL__DST=K,K;..."  # --fanout's form per relation
# fanouts per hop, or per relation (named src__rel__dst, PyG's string key) and hop
Fanouts = tuple[int, ...] | dict[str, tuple[int, ...]]


def parse_fanouts(text: str, layers: int | None = None, parameter: str = "fanouts") -> Fanouts:
    """``"10,5"`` -> ``(10, 5)``: the neighbours drawn per destination at hop 1 (the seeds'
    neighbours, read by the last layer), hop 2, ...; ``-1`` takes every neighbour. Per relation of
    a typed graph, ``"author__writes__paper=10,5;paper__cites__paper=15,10"`` (relations named as
    ``partition info`` and PyG's string keys name them, ``;`` between them) -> ``{"author__writes__paper":
    (10, 5), "paper__cites__paper": (15, 10)}``; which relations it must name is
    :func:`relation_fanouts`' check, against the graph's. Checked as :func:`check_fanouts`; the
    errors name ``parameter``."""
    if "=" in text:
        return check_fanouts(_per_relation(text, parameter), layers, parameter)
    return check_fanouts(_integers(text, parameter), layers, parameter)


def _integers(text: str, parameter: str) -> tuple[int, ...]:
    """``"10,5"`` -> ``(10, 5)``, unchecked."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SamplingError(
            f"{parameter} must be integers separated by commas, such as 10,5 (or {RELATION_FANOUTS} per relation); "
            f"got {text!r}",
            parameters=(parameter,),
        ) from None


def _per_relation(text: str, parameter: str) -> dict[str, str]:
    """``parameter``'s per-relation form (:func:`parse_fanouts`): each relation's text."""
    given: dict[str, str] = {}
    for entry in filter(None, (piece.strip() for piece in text.split(";"))):
        name, _, values = (part.strip() for part in entry.partition("="))
        if not values:
            raise SamplingError(
                f"{parameter} takes {RELATION_FANOUTS} per relation; got {entry!r}", parameters=(parameter,)
            )
        if name in given:
            raise SamplingError(
                f"{parameter} names relation {name} twice: give each relation once", parameters=(parameter,)
            )
        given[name] = values
    return given


def check_fanouts(given, layers: int | None = None, parameter: str = "fanouts") -> Fanouts:
    """The integers ``given`` as a tuple of fanouts, refused unless each is >= 1 or -1 (all), one
    per layer where ``layers`` is given; or a dict of such per relation (``src__rel__dst`` keys,
    or ``(src, rel, dst)`` keys, which become their names), every relation as many hops. The
    errors name ``parameter``."""
    if not isinstance(given, dict):
        return _hops(given, layers, parameter)
    fanouts = {}
    for key, hops in given.items():
        name = relation_name(key) if isinstance(key, tuple) else str(key)
        if len(name.split("__")) != 3 or not all(name.split("__")):
            raise SamplingError(
                f"{parameter} takes {RELATION_FANOUTS} per relation; got {name!r}", parameters=(parameter,)
            )
        try:
            fanouts[name] = _hops(_integers(hops, parameter) if isinstance(hops, str) else hops, layers, parameter)
        except SamplingError as error:
            raise SamplingError(f"{error} (relation {name})", parameters=error.parameters) from None
    lengths = sorted({len(hops) for hops in fanouts.values()})
    if len(lengths) > 1:
        raise SamplingError(
            f"{parameter} gives lists of {lengths} hops: give every relation one per layer", parameters=(parameter,)
        )
    return fanouts


def _hops(given, layers: int | None, parameter: str) -> tuple[int, ...]:
    """One list of fanouts checked (:func:`check_fanouts`)."""
    try:
        fanouts = tuple(int(f) for f in given)
    except (TypeError, ValueError):
        fanouts = None
    if fanouts is None or isinstance(given, str):
        raise SamplingError(f"{parameter} must be integers, such as (10, 5); got {given!r}", parameters=(parameter,))
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise SamplingError(
            f"{parameter} needs one value per layer, each >= 1 or -1 (all); got {fanouts}", parameters=(parameter,)
        )
    if layers is not None and len(fanouts) != layers:
        raise SamplingError(
            f"{parameter} gives {len(fanouts)} values but the model has layers {layers}: give one per layer",
            parameters=(parameter, "layers"),
        )
    return fanouts


def parse_eval_fanouts(text: str) -> tuple[int, ...]:
    """``--eval-fanout``'s text as :func:`parse_fanouts` reads it, its errors naming ``eval_fanouts``."""
    fanouts = parse_fanouts(text, parameter="eval_fanouts")
    if isinstance(fanouts, dict):
        raise SamplingError("eval_fanouts takes one list, such as 10,5", parameters=("eval_fanouts",))
    return fanouts


def relation_name(edge_type: EdgeType) -> str:
    """``("author", "writes", "paper")`` -> ``"author__writes__paper"`` (PyG's string key)."""
    return "__".join(edge_type)


def relation_fanouts(
    fanouts: Fanouts | dict, edge_types: list[EdgeType], name: str = "fanouts", error: type = SamplingError
) -> dict[EdgeType, list[int]]:
    """One list of fanouts per relation of ``edge_types``, in their order: a list is every
    relation's; a dict (keyed ``src__rel__dst`` or ``(src, rel, dst)``) names each relation once,
    with lists of one length.

    Raises:
        error: a dict naming relations the graph lacks, or missing some of its relations (each
            named, as ``src__rel__dst``), or lists of different lengths (``name``: the parameter).
    """
    if not isinstance(fanouts, dict):
        return {edge_type: list(fanouts) for edge_type in edge_types}
    keyed = {key if isinstance(key, tuple) else tuple(str(key).split("__")): hops for key, hops in fanouts.items()}
    unknown = [key for key in keyed if key not in edge_types]
    if unknown:
        raise error(
            f"{name} names relation{'s' * (len(unknown) > 1)} {_shown(unknown)} but the graph has none such: "
            f"its relations are {_shown(edge_types)}",
            parameters=(name,),
        )
    missing = [edge_type for edge_type in edge_types if edge_type not in keyed]
    if missing:
        raise error(
            f"{name} has no fanouts for relation{'s' * (len(missing) > 1)} {_shown(missing)}: give every relation "
            "its list (or one list for all relations)",
            parameters=(name,),
        )
    lengths = {len(hops) for hops in keyed.values()}
    if len(lengths) > 1:
        raise error(
            f"{name} gives lists of {sorted(lengths)} hops: give every relation one fanout per layer, "
            "the same number of hops",
            parameters=(name,),
        )
    return {edge_type: list(keyed[edge_type]) for edge_type in edge_types}


def format_fanouts(fanouts: Fanouts) -> str:
    """Fanouts as ``--fanout`` writes them: ``10,5``, or ``src__rel__dst=10,5;...`` per relation."""
    if not isinstance(fanouts, dict):
        return ",".join(map(str, fanouts))
    return ";".join(
        f"{relation_name(r) if isinstance(r, tuple) else r}={format_fanouts(hops)}" for r, hops in fanouts.items()
    )


def _shown(keys) -> str:
    """Relations as ``src__rel__dst``, other keys as their repr, separated by commas."""
    return ", ".join(relation_name(k) if isinstance(k, tuple) else repr(k) for k in keys)


def hop_fanouts(fanouts: Fanouts) -> tuple[int, ...]:
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
            raise SamplingError(f"period (T_ex) must be >= 1; got {self.period}", parameters=("period",))
        if self.epochs < 1:
            raise SamplingError(f"epochs must be >= 1; got {self.epochs}", parameters=("epochs",))
        if self.loss_threshold < 0:
            raise SamplingError(
                f"loss_threshold must be >= 0; got {self.loss_threshold}", parameters=("loss_threshold",)
            )
        if self.lr <= 0:
            raise SamplingError(f"the explainer's learning rate must be > 0; got {self.lr}")


# DGS's explanation graph (sample.explain.ExplanationGraph): a part's neighbourhood of at most
# EXPLAIN_NODES nodes is explained whole; a larger one links a uniform sample of EXPLAIN_NODES of its
# remote nodes to the pooled node, and predicts EXPLAIN_TARGETS of the part's nodes, each on its
# neighbourhood drawn with the training fanouts, for the class it explains
EXPLAIN_NODES = 8192
EXPLAIN_TARGETS = 8
