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


def parse_fanouts(text: str, layers: int | None = None, parameter: str = "fanouts") -> tuple[int, ...]:
    """``"10,5"`` -> ``(10, 5)``: the neighbours drawn per destination at hop 1 (the seeds'
    neighbours, read by the last layer), hop 2, ...; ``-1`` takes every neighbour (checked as
    :func:`check_fanouts`); the errors name ``parameter``."""
    try:
        fanouts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SamplingError(
            f"{parameter} must be integers separated by commas, such as 10,5; got {text!r}", parameters=(parameter,)
        ) from None
    return check_fanouts(fanouts, layers, parameter)


def check_fanouts(given, layers: int | None = None, parameter: str = "fanouts") -> tuple[int, ...]:
    """The integers ``given`` as a tuple of fanouts, refused unless each is >= 1 or -1 (all), one
    per layer where ``layers`` is given; the errors name ``parameter``."""
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
    return parse_fanouts(text, parameter="eval_fanouts")


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
