"""Max-min fair rates with strict priority classes: progressive filling, vectorised over flows.

Flows are given as a CSR over resources (one resource per link direction). Classes are served in
ascending ``priority`` order (0 first); a class shares fairly what the classes before it left.
"""

from __future__ import annotations

import numpy as np

_TIE = 1e-9  # resources whose fair share is within this factor of the minimum saturate together


def max_min_rates(
    flow_ptr: np.ndarray, flow_resources: np.ndarray, priorities: np.ndarray, capacity: np.ndarray
) -> np.ndarray:
    """Rate of every flow (bytes/s). A flow crossing no resource gets ``inf``; a flow whose
    resources the higher classes saturate gets 0 (it is preempted until they finish)."""
    n_flows = flow_ptr.shape[0] - 1
    lengths = np.diff(flow_ptr)
    owner = np.repeat(np.arange(n_flows), lengths)
    rates = np.full(n_flows, np.inf)
    residual = capacity.astype(np.float64).copy()
    n_res = residual.shape[0]
    for level_priority in np.unique(priorities[lengths > 0]):
        unfrozen = (priorities == level_priority) & (lengths > 0)
        while unfrozen.any():
            live = unfrozen[owner]
            counts = np.bincount(flow_resources[live], minlength=n_res)
            used = counts > 0
            share = np.full(n_res, np.inf)
            share[used] = residual[used] / counts[used]
            level = share.min()
            saturated = share <= level * (1 + _TIE) if level > 0 else share <= 0
            hit = np.zeros(n_flows, dtype=bool)
            hit[owner[live & saturated[flow_resources]]] = True
            rates[hit] = level
            residual -= level * np.bincount(flow_resources[hit[owner]], minlength=n_res)
            np.maximum(residual, 0.0, out=residual)
            unfrozen &= ~hit
    return rates
