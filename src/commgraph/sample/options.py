"""The samplers' names and options, light to import (no torch): a command's parser and its checks
before any worker starts use them."""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import SamplingError
from commgraph.sample.registry import SAMPLERS  # noqa: F401  (the registered names, read when asked)

FEATURE_RATE = 0.85  # N_f: the share of feature columns remote nodes send (thesis 3.4)
EPSILON = 0.1  # the deviation between local and remote counts, a share of the fanout
RULES = ("keep-local", "split")  # what DGS does with local neighbours (see DGSSampler)
EXPLAIN_IN = ("process", "worker")  # where DGS's online explainer runs (see sample.explain)
STRUCTURES = ("replicated", "partitioned")  # a machine's in-edges (see commgraph.sample.partitioned)


def parse_fanouts(text: str | list[int], layers: int | None = None) -> list[int]:
    """``"10,5"`` -> ``[10, 5]``: the neighbours drawn per destination at hop 1 (the seeds'
    neighbours, read by the last layer), hop 2, ...; ``-1`` takes every neighbour."""
    try:
        fanouts = [int(part) for part in text.split(",")] if isinstance(text, str) else [int(f) for f in text]
    except ValueError:
        raise SamplingError(f"--fanout must be integers separated by commas, such as 10,5; got {text!r}") from None
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise SamplingError(f"--fanout needs one value per layer, each >= 1 or -1 (all); got {text!r}")
    if layers is not None and len(fanouts) != layers:
        raise SamplingError(
            f"--fanout gives {len(fanouts)} values but the model has --layers {layers}: give one per layer"
        )
    return fanouts


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
