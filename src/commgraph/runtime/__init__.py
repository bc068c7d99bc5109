"""The only package that talks to torch.distributed: process groups, the local launcher, the
``Communicator``, the executor of all-gather plans (``Exchange`` as data, run layer-wise or streamed
bin by bin, forward and backward, tagged or in plan order), gradient all-reduce; also the worker
process's allocator setting."""

from commgraph.runtime.allreduce import NativeAllReduce, ScheduledAllReduce
from commgraph.runtime.comm import Communicator
from commgraph.runtime.grads import GradientSync
from commgraph.runtime.halo import gather_halo, halo_exchange, layerwise, scatter_back
from commgraph.runtime.launch import launch_local
from commgraph.runtime.memory import keep_freed_memory
from commgraph.runtime.stream import ExchangeRunner, GradientReturn, HaloStream
from commgraph.runtime.world import World, in_torchrun, join, pick_device

__all__ = ["Communicator", "ExchangeRunner", "GradientReturn", "GradientSync", "HaloStream",
           "NativeAllReduce", "ScheduledAllReduce",
           "World", "gather_halo", "halo_exchange", "in_torchrun", "join",
           "keep_freed_memory", "launch_local", "layerwise", "pick_device", "scatter_back"]
