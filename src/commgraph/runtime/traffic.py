"""``Traffic``: the bytes a worker sent, by what they carried, as named counters.

The :class:`~commgraph.runtime.comm.Communicator` charges every byte it sends to the label its
caller names (:meth:`~commgraph.runtime.comm.Communicator.count_as`): ``halo_forward:<layer>``
(layer ``l``'s boundary rows), ``halo_backward`` (their gradients), ``allreduce``, ``features``
(feature rows), ``requests`` (ids asked of owners), ``sampling`` (remote hops), ``activations`` and
``activation_grads`` (first-layer rows computed by their owners, and their gradients), ``labels``
(the bridge's rows of ``y`` and the masks); a trainer adds ``local``, the rows read from the same
machine's files (no network). :class:`Traffic` holds
them as fields, adds and subtracts field by field, and :func:`global_traffic` sums it over the
workers in one all-reduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from itertools import zip_longest
from typing import Protocol

from commgraph.errors import JobError

FORWARD = "halo_forward"


class Sums(Protocol):
    """What :func:`global_traffic` needs of a :class:`~commgraph.runtime.comm.Communicator`."""

    def global_sum(self, values: list) -> list: ...


@dataclass(frozen=True)
class Traffic:
    """Bytes sent, by what they carried (see the module's description); ``other``: labels of none
    of these fields.

    Shapes:
        halo_forward ``[layers]``: entry ``l`` is layer ``l``'s (0 where it moved nothing).
    """

    halo_forward: tuple[int, ...] = ()
    halo_backward: int = 0
    allreduce: int = 0
    features: int = 0
    requests: int = 0
    sampling: int = 0
    activations: int = 0
    activation_grads: int = 0
    labels: int = 0
    local: int = 0
    other: int = 0

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> Traffic:
        """The traffic of a communicator's per-label counts (``halo_forward:<layer>`` keys by layer)."""
        named = {f.name for f in fields(cls)} - {FORWARD, "other"}
        layers = {int(k.split(":")[1]): v for k, v in counts.items() if _forward_layer(k)}
        forward = tuple(layers.get(layer, 0) for layer in range(max(layers, default=-1) + 1))
        other = sum(v for k, v in counts.items() if k not in named and not _forward_layer(k))
        return cls(forward, **{k: int(v) for k, v in counts.items() if k in named}, other=int(other))

    def __add__(self, other: Traffic) -> Traffic:
        return self._combine(other, 1)

    def __sub__(self, other: Traffic) -> Traffic:
        return self._combine(other, -1)

    def _combine(self, other: Traffic, sign: int) -> Traffic:
        forward = tuple(a + sign * b for a, b in zip_longest(self.halo_forward, other.halo_forward, fillvalue=0))
        return Traffic(
            forward,
            **{name: getattr(self, name) + sign * getattr(other, name) for name in _COUNTERS},
        )

    def layers(self, count: int) -> Traffic:
        """This traffic with ``halo_forward`` ``count`` entries long (zeros added).

        Raises:
            JobError: more than ``count`` layers moved rows.
        """
        if len(self.halo_forward) > count:
            raise JobError(f"rows moved at {len(self.halo_forward)} layers, more than the model's {count}")
        return Traffic(self.halo_forward + (0,) * (count - len(self.halo_forward)), *self._values())

    @property
    def network(self) -> int:
        """Every byte that crossed between workers (all but ``local``)."""
        return sum(self.halo_forward) + sum(getattr(self, name) for name in _COUNTERS if name != "local")

    def _values(self) -> list[int]:
        return [getattr(self, name) for name in _COUNTERS]


_COUNTERS = tuple(f.name for f in fields(Traffic) if f.name != FORWARD)


def _forward_layer(label: str) -> bool:
    head, _, layer = label.partition(":")
    return head == FORWARD and layer.isdigit()


def global_traffic(comm: Sums, traffic: Traffic, layers: int) -> Traffic:
    """``traffic`` summed over every worker (a collective: every worker calls it with the same
    ``layers``, the length of ``halo_forward`` it is padded to)."""
    padded = traffic.layers(layers)
    summed = [int(v) for v in comm.global_sum(list(padded.halo_forward) + padded._values())]
    return Traffic(tuple(summed[:layers]), *summed[layers:])
