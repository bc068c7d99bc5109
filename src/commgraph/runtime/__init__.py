"""The only package that talks to torch.distributed: process groups, the local launcher, the
``Communicator`` that executes plans, the autograd halo exchange and gradient all-reduce; also the
worker process's allocator setting."""

from commgraph.runtime.comm import Communicator, Exchange, Message
from commgraph.runtime.grads import GradientSync
from commgraph.runtime.halo import halo_exchange
from commgraph.runtime.launch import launch_local
from commgraph.runtime.memory import keep_freed_memory
from commgraph.runtime.world import World, in_torchrun, join, pick_device

__all__ = ["Communicator", "Exchange", "GradientSync", "Message", "World", "halo_exchange", "in_torchrun",
           "join", "keep_freed_memory", "launch_local", "pick_device"]
