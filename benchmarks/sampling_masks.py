"""DGS's masks for ``benchmarks/sampling.py``, made by the project's explainer
(:class:`commgraph.sample.explain.DGSExplainer`) in the measuring process, one part after another
on one thread each, and kept in ``--masks-dir`` for later runs; one explanation timed on its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from commgraph.atomic import atomic_write
from commgraph.nn import GNN
from commgraph.partition import load_partition_set
from commgraph.runtime.memory import keep_freed_memory
from commgraph.sample import DGSMasks, SamplingGraph, parse_fanouts
from commgraph.sample.maskfile import load_masks, save_masks


def part_explainer(pset, part: int, args, seed: int = 0):
    """The project's explainer for ``part`` (its explanation graph's remote rows read from the
    set), explaining the model ``commgraph train --seed seed`` starts from: at the thesis's scale
    no training run fits this machine, and the explainer's cost does not depend on the weights."""
    from commgraph.sample.explain import DGSExplainer, ExplainerOptions, ExplanationGraph

    layers = len(parse_fanouts(args.fanout))
    sampling = SamplingGraph.from_partition(pset, part)
    explanation = ExplanationGraph.build(sampling, lambda ids: pset.rows("features", ids), layers)
    classes = int(np.max(pset.rows("labels", np.arange(sampling.num_nodes)))) + 1
    torch.manual_seed(seed)  # as the trainer seeds its weights
    model = GNN("sage", pset.part(part).features.shape[1], args.hidden, classes, layers=layers, dropout=0.5)
    return DGSExplainer(sampling, explanation, model, ExplainerOptions())


def explanation_time(partdir: Path, args) -> dict[str, float]:
    """One explanation of part 0 by the project's explainer on one thread, in the process that
    measures it."""
    explainer = part_explainer(load_partition_set(partdir), 0, args)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rounds = [explainer.explain(explainer.model.state_dict(), i) for i in range(args.explain_repeats)]
    torch.set_num_threads(threads)
    return {
        "remote": int(explainer.explanation.remote.shape[0]),
        "seconds": [r.seconds for r in rounds],
        "cpu_seconds": [r.cpu_seconds for r in rounds],
        "epochs": rounds[0].epochs,
    }


def masks_file(pset, args, seed: int) -> Path | None:
    """Where ``--masks-dir`` keeps every part's masks for ``seed`` (a ``--dgs-masks`` file)."""
    return None if args.masks_dir is None else Path(args.masks_dir) / f"{pset.path.name}-seed{seed}.npz"


def seed_masks(pset, args, seed: int, parts=None) -> tuple[list[DGSMasks] | None, list[float]]:
    """Every part's masks for ``seed`` from the project's explainer (:func:`part_explainer`, one
    part after another, one thread each) and the wall seconds of the explanations made now. With
    ``--masks-dir`` each part's masks are kept there as soon as they are made and every part's, once
    all are, in one mask file that later runs read back (checked against the set). ``parts``: make
    only those parts' masks (returns None for the masks until every part has some)."""
    whole = masks_file(pset, args, seed)
    folder = None if whole is None else whole.with_suffix("")
    if whole is not None and whole.is_file():
        return load_masks(whole, pset, pset.part(0).features.shape[1]), []
    made, seconds = {}, []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    keep_freed_memory()  # as a training worker does, where --dgs-masks-out explains
    for part in range(pset.num_parts) if parts is None else parts:
        kept = None if folder is None else folder / f"part{part}.npz"
        if kept is not None and kept.is_file():
            continue
        explainer = part_explainer(pset, part, args, seed)
        explained = explainer.explain(explainer.model.state_dict(), 0)
        made[part] = explained.masks
        seconds.append(explained.seconds)
        print(
            f"  masks of part {part} (seed {seed}): {explainer.explanation.remote.shape[0]} remote nodes, "
            f"{explained.epochs} epochs, {explained.seconds:.1f} s",
            flush=True,
        )
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(kept) as handle:
                np.savez(handle, node_prob=explained.masks.node_prob, feature_mask=explained.masks.feature_mask)
        del explainer
    torch.set_num_threads(threads)
    if folder is not None:
        for part in range(pset.num_parts):
            if part not in made and (folder / f"part{part}.npz").is_file():
                with np.load(folder / f"part{part}.npz") as data:
                    made[part] = DGSMasks(data["node_prob"], data["feature_mask"])
    if len(made) < pset.num_parts:
        return None, seconds
    masks = [made[part] for part in range(pset.num_parts)]
    if whole is not None:
        save_masks(whole, pset, masks)
    return masks, seconds


# Table 3.3's rows, as DGSSampler's options: node sampling only (N_f = 1), feature sampling only
# (epsilon = 0), both
DGS_VARIANTS = {"dgs-node": {"feature_rate": 1.0}, "dgs-feature": {"epsilon": 0.0}, "dgs": {}}
