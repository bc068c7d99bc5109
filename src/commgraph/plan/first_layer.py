"""How a remote input row reaches layer 0 of a full-graph pass: as its features, or as its owner's
transform of it (P3, Gandhi and Iyer, OSDI'21; :mod:`commgraph.train.owner`).

A part's full-graph layer 0 reads its halo's rows. Shipping features moves each halo row once,
``width`` floats, before the first pass, and the part keeps them for the run (a table of
``halo x width``, with METIS on a dense graph most of the graph's rows on every worker). With the
owner's first layer, the owner sends ``W x_u``, ``hidden`` floats, at every forward pass and gets
its gradient back at every backward pass: no halo feature table at all, and fewer bytes whenever

    hidden * (2 * training_passes + evaluation_passes) < width.

``auto`` (the default) takes the owner's first layer exactly then, for the models whose first
layer transforms each source row before aggregating (GCN, GraphSAGE), where a halo exchange exists
(not ``--exchange replicate``). Sampled training's steps keep shipping features under ``auto``
(the regime of DGS and DistDGL, whose byte counts the experiments compare; ``owner`` asks for
P3's); its full-graph evaluation pass follows the rule with no training pass.

One worker has no halo: both ways move nothing, and ``auto`` ships features (aggregate, then
transform), except from a feature table streamed from host memory (``--features host`` on a GPU).
There a streamed layer 0 reads each row once for every chunk of destinations that reads it, and
the owner's path transforms the owned rows in consecutive chunks, each row read once a pass
(measured on an H200: 477 against 2,437 ms a step, docs/benchmarks/features.md, "The GPU check again").
"""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import TrainingError
from commgraph.nn.options import LINEAR_FIRST

FIRST_LAYERS = ("auto", "features", "owner")


@dataclass(frozen=True)
class FirstLayerChoice:
    """What crosses for layer 0: ``mode`` (``features`` or ``owner``) for the full-graph pass
    (training's, or sampled training's evaluation), and why, in words."""

    mode: str
    reason: str

    @property
    def owner(self) -> bool:
        return self.mode == "owner"


def evaluation_passes(epochs: int, eval_every: int) -> int:
    """Evaluations of a run: every ``eval_every`` epochs and after the last."""
    return epochs // eval_every + (epochs % eval_every != 0)


def choose_first_layer(
    asked: str,
    *,
    model: str,
    width: int,
    hidden: int,
    epochs: int,
    evaluations: int,
    sampled: bool,
    replicate: bool,
    workers: int,
    streamed: bool = False,
) -> FirstLayerChoice:
    """The first layer's mode for a run's full-graph pass (the module's rule).

    Args:
        asked: ``--first-layer``: ``auto``, ``features`` or ``owner``.
        model: the GNN kind; width, hidden: the input features' and the hidden layers' widths.
        epochs, evaluations: the run's full-graph training passes (one per epoch; none when
            ``sampled``) and evaluation passes.
        sampled: mini-batch training (its full-graph pass is evaluation only).
        replicate: ``--exchange replicate`` (no halo exchange to replace).
        workers: the job's workers (one: no halo).
        streamed: layer 0 streams the part's rows from a host feature table.

    Raises:
        TrainingError: an unknown mode.
    """
    if asked not in FIRST_LAYERS:
        raise TrainingError(f"unknown --first-layer {asked!r}; choose one of {', '.join(FIRST_LAYERS)}")
    if asked != "auto":
        return FirstLayerChoice(asked, f"--first-layer {asked} asked")
    if model not in LINEAR_FIRST or replicate:
        why = "--exchange replicate has no halo exchange" if replicate else f"{model}'s first layer is not linear"
        return FirstLayerChoice("features", f"halo rows cross as features ({why})")
    if workers == 1:
        if streamed:
            return FirstLayerChoice(
                "owner", "one worker on a host feature table: layer 0 transforms each row once a pass, then aggregates"
            )
        return FirstLayerChoice("features", "one worker: no halo rows to ship")
    passes = evaluations + (0 if sampled else 2 * epochs)
    owner_floats, feature_floats = hidden * passes, width
    if owner_floats < feature_floats:
        return FirstLayerChoice(
            "owner",
            f"the owners compute layer 0 of their halo rows: {hidden} floats a row at each of {passes} "
            f"pass(es) ({owner_floats}) against {width} features once, and no halo feature table",
        )
    return FirstLayerChoice(
        "features",
        f"halo rows cross as features: {width} floats a row once, against {hidden} at each of {passes} "
        f"pass(es) ({owner_floats}) from their owners",
    )
