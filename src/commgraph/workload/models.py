"""Transformer models, GPUs and their compute times.

Presets are the models of the Hermod thesis (thesis-dgs-g3-hermod-leo, Table 5.5) with the shapes
their public configurations give: GPT-3 (Brown et al. 2020), Mixtral (Jiang et al. 2024) and
Qwen1.5-MoE. The layer counts, expert counts, sequence lengths and micro-batch sizes are Table 5.5's.

FLOPs of one transformer layer's forward pass on a micro-batch of ``b`` sequences of ``s`` tokens
(Narayanan et al., SC'21, Megatron-LM):

.. math::
    F_{attn} = 8 b s h^2 + 4 b s^2 h, \\qquad
    F_{mlp} = 16 b s h^2 \\ (\\text{dense, } 4h), \\qquad
    F_{moe} = 6 b s h f k \\ (\\text{SwiGLU experts of width } f, \\text{ top-}k)

and the output layer ``2 b s h V``. A backward pass costs twice its forward. A GPU runs them at
``peak x efficiency``.
"""

from __future__ import annotations

from dataclasses import dataclass

from commgraph.errors import SimulationError


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. ``experts == 0`` is a dense model (4h MLP); otherwise every
    layer's MLP is ``experts`` SwiGLU experts of width ``ffn`` of which each token uses ``top_k``.
    ``vocab == 0`` leaves the output layer out."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch: int
    vocab: int
    experts: int = 0
    top_k: int = 0
    ffn: int = 0

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "seq_len", "micro_batch"):
            if getattr(self, field) < 1:
                raise SimulationError(f"model {self.name}: {field} must be >= 1, got {getattr(self, field)}")
        if self.vocab < 0:
            raise SimulationError(f"model {self.name}: vocab must be >= 0")
        if self.experts and not (1 <= self.top_k <= self.experts and self.ffn >= 1):
            raise SimulationError(f"model {self.name}: an MoE model needs 1 <= top_k <= experts and ffn >= 1")

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch."""
        return self.seq_len * self.micro_batch

    def attention_flops(self) -> float:
        b, s, h = self.micro_batch, self.seq_len, self.hidden
        return 8.0 * b * s * h * h + 4.0 * b * s * s * h

    def mlp_flops(self) -> float:
        b, s, h = self.micro_batch, self.seq_len, self.hidden
        if self.moe:
            return 6.0 * b * s * h * self.ffn * self.top_k
        return 16.0 * b * s * h * h

    def head_flops(self) -> float:
        return 2.0 * self.micro_batch * self.seq_len * self.hidden * self.vocab

    def layer_params(self) -> float:
        """Parameters of one layer (attention 4h^2; MLP 8h^2 dense or 3hf per expert)."""
        h = self.hidden
        return 4.0 * h * h + (3.0 * h * self.ffn * self.experts if self.moe else 8.0 * h * h)

    def activation_bytes(self) -> float:
        """One micro-batch's hidden states in bf16: what a pipeline stage hands to the next."""
        return 2.0 * self.tokens * self.hidden


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("gpt3-13b", layers=40, hidden=5120, heads=40, seq_len=2048, micro_batch=4, vocab=50257),
        ModelSpec("gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048, micro_batch=8, vocab=50257),
        ModelSpec(
            "mixtral-8x7b",
            layers=32,
            hidden=4096,
            heads=32,
            seq_len=4096,
            micro_batch=4,
            vocab=32000,
            experts=8,
            top_k=2,
            ffn=14336,
        ),
        ModelSpec(
            "mixtral-8x22b",
            layers=32,
            hidden=6144,
            heads=48,
            seq_len=4096,
            micro_batch=8,
            vocab=32768,
            experts=8,
            top_k=2,
            ffn=16384,
        ),
        ModelSpec(
            "qwen-moe-12l",
            layers=12,
            hidden=2048,
            heads=16,
            seq_len=4096,
            micro_batch=4,
            vocab=151936,
            experts=64,
            top_k=4,
            ffn=1408,
        ),
        ModelSpec(
            "qwen-moe-24l",
            layers=24,
            hidden=2048,
            heads=16,
            seq_len=4096,
            micro_batch=8,
            vocab=151936,
            experts=64,
            top_k=4,
            ffn=1408,
        ),
    )
}

# Table 5.5's default (tp, pp, ep) per model; the data-parallel degree is the user's.
DEFAULT_LAYOUT: dict[str, tuple[int, int, int]] = {
    "gpt3-13b": (4, 4, 1),
    "gpt3-175b": (8, 8, 1),
    "mixtral-8x7b": (1, 2, 8),
    "mixtral-8x22b": (8, 8, 8),
    "qwen-moe-12l": (1, 4, 8),
    "qwen-moe-24l": (8, 8, 32),
}


@dataclass(frozen=True)
class GPUSpec:
    """Dense bf16 tensor-core peak (FLOP/s) and the fraction of it training reaches."""

    name: str
    peak_flops: float
    efficiency: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.efficiency <= 1:
            raise SimulationError(f"GPU efficiency must be in (0, 1], got {self.efficiency}")

    def seconds(self, flops: float) -> float:
        return flops / (self.peak_flops * self.efficiency)


GPUS = {"a100": 312e12, "h100": 989e12}  # NVIDIA datasheets, dense bf16


def model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise SimulationError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name]


def gpu(name: str, efficiency: float = 0.5) -> GPUSpec:
    if name not in GPUS:
        raise SimulationError(f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUSpec(name, GPUS[name], efficiency)
