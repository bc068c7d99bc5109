"""The only package that talks to torch.distributed: process groups, the local launcher, the
``Communicator``, the executor of all-gather plans (``Exchange`` as data, run layer-wise or streamed
bin by bin, forward and backward, tagged or in plan order), gradient all-reduce; also the worker
process's allocator setting. Its names load on first use (:mod:`commgraph.lazy`): the job's options
(:mod:`commgraph.runtime.options`) do not import torch."""

from commgraph.lazy import exports

__all__ = [
    "Communicator",
    "ExchangeRunner",
    "GradientReturn",
    "GradientSync",
    "HaloStream",
    "NativeAllReduce",
    "ScheduledAllReduce",
    "World",
    "gather_halo",
    "halo_exchange",
    "halo_table",
    "in_torchrun",
    "join",
    "keep_freed_memory",
    "launch_local",
    "layerwise",
    "pick_device",
    "scatter_back",
]

__getattr__ = exports(
    __name__,
    {
        "NativeAllReduce": "allreduce",
        "ScheduledAllReduce": "allreduce",
        "Communicator": "comm",
        "GradientSync": "grads",
        "gather_halo": "halo",
        "halo_exchange": "halo",
        "halo_table": "halo",
        "layerwise": "halo",
        "scatter_back": "halo",
        "launch_local": "launch",
        "keep_freed_memory": "memory",
        "ExchangeRunner": "stream",
        "GradientReturn": "stream",
        "HaloStream": "stream",
        "World": "world",
        "join": "world",
        "pick_device": "world",
        "in_torchrun": "options",
    },
)
