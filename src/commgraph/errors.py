"""Typed errors. Every error a user can cause is one of these, and its message says what was wrong
and how to fix it; the CLI prints it as one line and exits non-zero."""

from __future__ import annotations

from os import PathLike


class CommgraphError(Exception):
    """Base of every error commgraph raises on purpose (bad input, bad configuration). One about
    options names them as the library spells them (``fanouts must be ...``) and lists those names
    in ``parameters``, which the CLI spells as its flags (``--fanout must be ...``)."""

    def __init__(self, *args, parameters: tuple[str, ...] = ()):
        super().__init__(*args)
        self.parameters = tuple(parameters)


class GraphValidationError(CommgraphError, ValueError):
    """A graph's arrays are inconsistent (ids out of range, shape mismatch, NaN features, ...)."""


class GraphFormatError(CommgraphError, ValueError):
    """A graph file or directory cannot be read in the format it was taken for."""

    def __init__(self, path: str | PathLike[str], message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}, line {line}"
        super().__init__(f"{where}: {message}")


class GraphSpecError(CommgraphError, ValueError):
    """A graph named on the command line is neither a bundled name, a synthetic spec nor a path."""


class TopologyError(CommgraphError, ValueError):
    """A topology (YAML file, preset name, detection output) is malformed or inconsistent."""


class SimulationError(CommgraphError, ValueError):
    """A task DAG given to the simulator is malformed (unknown device, cycle, bad sizes)."""


class PartitionError(CommgraphError, ValueError):
    """A partitioning request or a partition set on disk is invalid or does not fit the graph."""


class PlanError(CommgraphError, ValueError):
    """A communication plan cannot be made (parts vs devices, disconnected GPUs) or read."""


class JobError(CommgraphError, ValueError):
    """A distributed job cannot be set up: its partition set does not fit the world (parts vs
    workers), or its topology, placement or plan does not fit the set."""


class TrainingError(CommgraphError, ValueError):
    """A training request is inconsistent (workers vs parts, model options, checkpoint mismatch)."""


class WorkerFailed(CommgraphError, RuntimeError):
    """Another worker of the job died, failed or stopped answering; the message names its rank."""


class DatasetError(CommgraphError, RuntimeError):
    """A named dataset cannot be downloaded, verified or converted (network, damaged file, wrong
    checksum or statistics); the message names the file, the URL and what to do."""


class Unreachable(DatasetError):
    """A file's server cannot be reached: its host does not resolve, or every try failed. The
    message says why; the dataset cache names every file still to fetch by hand."""


class AnalyticsError(CommgraphError, ValueError):
    """A graph analytics request is invalid (unknown source, negative SSSP weights, options out of range)."""


class SamplingError(CommgraphError, ValueError):
    """A sampler's options or a batch are invalid (fanouts vs layers, empty batch, bad seeds)."""


class FeatureError(CommgraphError, ValueError):
    """A feature store request is invalid: an index out of range or empty, a table that cannot be
    placed where it was asked (``--features gpu`` larger than the GPU's free memory)."""


class OutputError(CommgraphError, ValueError):
    """A file or folder a command was asked to write cannot be written there (a folder where a
    file was asked, a path under a file, a folder it may not write in, an existing file without
    ``--force``); refused before any work is done."""


class OptionError(CommgraphError, ValueError):
    """A value typed on the command line or in a spec is malformed (a size that is not bytes)."""


class BridgeError(CommgraphError, ValueError):
    """A user's PyG script asked the bridge (:mod:`commgraph.pyg`) for something it cannot do: a
    model without a ``MessagePassing`` layer, ids out of range, a loader's options that disagree with
    the data, a call before :func:`commgraph.pyg.init`."""
