"""DGS's masks in a file: every worker's node and feature mask for one partition set, so that
training can sample with masks from its first step (``commgraph train --dgs-masks FILE``), and the
command that writes them (``--dgs-masks-out FILE``).

The file is one ``.npz`` (no pickles):

- ``format``: ``commgraph-dgs-masks/1``;
- ``graph_checksum``, ``parts``, ``assignment_sha256``: the partition set's identity (the graph's
  checksum, the part count and the SHA-256 of the int64 part id of every node), so masks made for
  another set are refused;
- ``node_prob``: ``[parts, N]`` float32, part ``k``'s :math:`\\mathcal{SN}` (non-zero only on the
  remote nodes its explanation graph reaches);
- ``feature_mask``: ``[parts, F]`` float32, part ``k``'s :math:`\\mathcal{SF}`;
- ``iteration``: ``[parts]`` int64, the training step of the model each part's masks explain.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from pathlib import Path

import numpy as np

from commgraph.atomic import atomic_write
from commgraph.errors import SamplingError
from commgraph.partition.store import PartitionSet
from commgraph.sample.dgs import DGSMasks

FORMAT = "commgraph-dgs-masks/1"


def partition_identity(pset: PartitionSet) -> dict:
    """What a mask file must match: the graph's checksum, the part count, the assignment's hash."""
    digest = hashlib.sha256(np.ascontiguousarray(pset.assignment(), dtype=np.int64).tobytes()).hexdigest()
    return {"graph_checksum": pset.manifest["graph"]["checksum"], "parts": pset.num_parts, "assignment_sha256": digest}


def save_masks(path: str | Path, pset: PartitionSet, masks: list[DGSMasks]) -> None:
    """Write one :class:`DGSMasks` per part of ``pset`` to ``path`` (atomically)."""
    if len(masks) != pset.num_parts:
        raise SamplingError(f"{len(masks)} masks for a partition set of {pset.num_parts} parts")
    identity = partition_identity(pset)
    with atomic_write(path) as handle:
        np.savez(
            handle,
            format=np.array(FORMAT),
            graph_checksum=np.array(identity["graph_checksum"]),
            parts=np.array(identity["parts"]),
            assignment_sha256=np.array(identity["assignment_sha256"]),
            node_prob=np.stack([m.node_prob.astype(np.float32) for m in masks]),
            feature_mask=np.stack([m.feature_mask.astype(np.float32) for m in masks]),
            iteration=np.array([m.iteration for m in masks], dtype=np.int64),
        )


def _read(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``; anything else (a ``.npy``, text, an empty,
    truncated or corrupt file) is refused with a :class:`SamplingError`."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        raise _refused(path, "empty, damaged or of another format") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise _refused(path, "a single .npy array")
    try:
        with loaded:
            return {name: loaded[name] for name in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error):
        raise _refused(path, "truncated or damaged") from None


def _refused(path: str | Path, why: str) -> SamplingError:
    return SamplingError(
        f"--dgs-masks {path} is {why}: not a mask file ({FORMAT}, an .npz); write one with --dgs-masks-out"
    )


def load_masks(path: str | Path, pset: PartitionSet, num_features: int) -> list[DGSMasks]:
    """The masks in ``path``, one per part, refused with a :class:`SamplingError` unless they were
    made for exactly this partition set and feature width."""
    arrays = _read(path)
    missing = {
        "format",
        "graph_checksum",
        "parts",
        "assignment_sha256",
        "node_prob",
        "feature_mask",
        "iteration",
    } - set(arrays)
    if missing or str(arrays["format"]) != FORMAT:
        raise SamplingError(f"--dgs-masks {path}: not a {FORMAT} file (write one with --dgs-masks-out)")
    identity = partition_identity(pset)
    if (
        any(arrays[key].shape != () for key in (*identity, "format"))
        or not all(np.issubdtype(arrays[key].dtype, np.floating) for key in ("node_prob", "feature_mask"))
        or not np.issubdtype(arrays["iteration"].dtype, np.integer)
    ):
        raise _refused(path, "damaged (arrays of the wrong kind)")
    for key, value in identity.items():
        found = arrays[key].item()
        if found != value:
            raise SamplingError(
                f"--dgs-masks {path} was made for another partition set ({key} {found}, this set's "
                f"{value}): write masks for {pset.path} with --dgs-masks-out"
            )
    nodes = int(pset.manifest["graph"]["num_nodes"])
    node_prob, feature_mask = arrays["node_prob"], arrays["feature_mask"]
    if (
        node_prob.shape != (pset.num_parts, nodes)
        or feature_mask.shape != (pset.num_parts, num_features)
        or arrays["iteration"].shape != (pset.num_parts,)
    ):
        raise SamplingError(
            f"--dgs-masks {path}: masks of shape {node_prob.shape} and {feature_mask.shape}, expected "
            f"({pset.num_parts}, {nodes}) and ({pset.num_parts}, {num_features})"
        )
    if not (np.all((node_prob >= 0) & (node_prob <= 1)) and np.all(np.isfinite(feature_mask))):
        raise SamplingError(f"--dgs-masks {path}: node probabilities outside [0, 1] or a non-finite feature mask")
    return [DGSMasks(node_prob[k], feature_mask[k], int(arrays["iteration"][k])) for k in range(pset.num_parts)]
