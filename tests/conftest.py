from pathlib import Path

import pytest

PLANETOID_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "planetoid"


@pytest.fixture
def planetoid_dir() -> Path:
    if not (PLANETOID_DIR / "ind.cora.graph").is_file():
        pytest.skip(f"raw Planetoid Cora files not found at {PLANETOID_DIR}")
    return PLANETOID_DIR


@pytest.fixture
def switch_planes():
    """A builder of ``gpus`` GPUs each joined to every one of ``planes`` switches (NVSwitch planes)
    by an NVSwitch port entry of ``gbps``."""
    from commgraph.topology import Device, Link, Topology

    def build(gpus: int, planes: int, gbps: float = 40.0) -> Topology:
        return Topology(f"planes-{gpus}x{planes}", [Device(f"gpu{g}", "gpu") for g in range(gpus)]
                        + [Device(f"sw{s}", "nvswitch") for s in range(planes)],
                        [Link(f"gpu{g}", f"sw{s}", "nvswitch", 2, gbps, 1.0)
                         for g in range(gpus) for s in range(planes)])

    return build
