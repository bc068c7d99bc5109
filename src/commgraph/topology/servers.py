"""Single servers, wired as they are built: their link speeds, the link builder, and one wiring
function per server preset (:data:`SERVERS`; names and the rule that sets speeds:
:mod:`commgraph.topology.presets`).

Speeds default to DGCL's measurements (Cai et al., "DGCL: An Efficient Communication Library for
Distributed GNN Training", EuroSys 2021; dgcl-slides.txt, Table 1), in GB/s per direction:
NV2 48.35, NV1 24.22, PCIe 11.13, QPI 9.56, IB 6.37, Ethernet 3.12. An NVSwitch port entry of
``count`` links gets ``count x nv1``. Every preset takes other speeds (``speeds={"pcie": 24}``).
Latencies are typical one-hop figures, not measurements: NVLink 1 us, PCIe 1.5 us, QPI 1 us,
InfiniBand 2 us, Ethernet 10 us, shared memory 0.5 us.

``dgx-a100``, ``hgx-h100`` and ``hgx-h20`` have speeds of their own (:data:`SERVER_SPEEDS`).

Where each wiring comes from:

- ``dgx1-v100``, ``p3.16xlarge``: NVIDIA, "DGX-1 with Tesla V100 System Architecture" (white paper,
  2017): 8 V100s in a hybrid cube-mesh of NVLinks (:data:`DGX1_NV2`, :data:`DGX1_NV1`, in
  ``nvidia-smi`` numbering), two GPUs and one InfiniBand NIC per PCIe switch, two switches per
  CPU socket. AWS's p3.16xlarge is the same board.
- ``p3.8xlarge``: AWS EC2 P3, 4 V100s: GPUs 0-3 of the same board and their NVLinks.
- ``p2.16xlarge``: AWS EC2 P2, 8 K80 boards of 2 GPUs each behind the board's PCIe switch.
- ``pcie-8gpu-qpi``: 8 GPUs without NVLink on two sockets joined by QPI, like DGCL's 8 x 1080 Ti
  machine (dgcl-slides.txt, "Experiment Setup").
- ``dgx-a100``: NVIDIA, "DGX A100 System Architecture" (white paper, 2020): 6 NVSwitches, 2
  NVLink3 links from every GPU to each (12 per GPU); 4 PCIe gen4 switches with 2 GPUs and 2
  ConnectX-6 HDR 200 Gb/s NICs each. Speeds (``SERVER_SPEEDS``): NVLink3 20 GB/s per link and
  direction, NCCL's effective rate (src/graph/topo.h SM80_NVLINK_BW; 25 on the wire, ~20 with the
  SMs' 128-byte payloads: S. Jeaugey, github.com/NVIDIA/nccl-tests/issues/149, where 8 GPUs reach
  an all_reduce_perf bus bandwidth of ~230 GB/s); PCIe gen4 x16 24 GB/s; NICs 25 GB/s.
- ``hgx-h100``: NVIDIA, "DGX H100 System Architecture" / "H100 Tensor Core GPU Architecture"
  (white papers, 2022): 4 third-generation NVSwitches, 18 NVLink4 links per GPU split 5, 4, 4, 5
  (900 GB/s both directions); PCIe gen5; 8 ConnectX-7 NDR 400 Gb/s NICs. Speeds: NVLink4 20.6 GB/s
  per link and direction (topo.h SM90_NVLINK_BW; 370 GB/s per GPU, the effective NVLink bandwidth
  NCCL reaches, S. Jeaugey, github.com/NVIDIA/nccl-tests/issues/212); PCIe gen5 x16 48 GB/s; NICs
  50 GB/s.
- ``hgx-h20``: MMA's 8 x NVIDIA H20 server (Tang et al., "MultiPath Memory Access: Breaking
  Host-GPU Bandwidth Bottlenecks in LLM Services", arXiv 2512.16056, 2025: dual AMD EPYC 9005,
  NVLink 4.0, PCIe 5.0 x16), wired as ``hgx-h100`` (4 PCIe switches, 2 GPUs and 2 NICs each, 2 per
  socket; 4 NVSwitches). Speeds: a GPU's PCIe link 53.0 GB/s, the paper's native single-path copy
  (245 GB/s / 4.62; its Table 1 gives 52-60 GB/s real for PCIe 5.0 x16); a switch's uplink 60 GB/s
  (:data:`H20_UPLINK_GBPS`, the top of that measured range: no published figure for this server's
  uplinks; at the bottom, 52, the split would reach 208 GB/s); the sockets' Infinity Fabric 300
  GB/s per direction (half the low end of the paper's 600-750 GB/s real); NVLink4 as ``hgx-h100``.
  ``commgraph sim multipath h2d --topology hgx-h20 --gpus 0``: the split reaches 239.7 GB/s,
  4.52x one path, against the paper's 245 GB/s and 4.62x.
- ``leo-fnic``: the thesis's F-NIC testbed host (thesis-dgs-g3-hermod-leo, section 6.4.1): an
  8-core Xeon Silver 4110 (``cpu0``; the key-value store's 8 cores are a workload option) and a
  Xilinx VU35P FPGA board carrying both the RDMA NIC logic (``nic0``) and the accelerator logic
  (``fpga0``, an ``accelerator`` device), off-path: the NIC reaches the accelerator on the chip
  (12.5 GB/s, the board's 100 GbE port; 0.1 us) and host memory over PCIe gen3 x16 (the ``pcie``
  speed, DGCL's 11.13 GB/s; 1.5 us).

Latencies and the NVSwitch servers' speeds (``count x nv1``) are not measured on those machines;
``commgraph topo calibrate`` measures a real one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from commgraph.errors import TopologyError
from commgraph.topology.model import Device, Link, Topology

DEFAULT_SPEEDS = {"nv1": 24.22, "nv2": 48.35, "pcie": 11.13, "qpi": 9.56, "ib": 6.37, "ethernet": 3.12, "shm": 8.0}
# PCIe x16 per direction as NCCL's topology model rates it (width x GT/s / 80, src/graph/topo.cc;
# gen3 x16 = 12 GB/s, its PCI_BW): gen4 24 GB/s, gen5 48 GB/s.
PCIE_GEN4_GBPS = 24.0
PCIE_GEN5_GBPS = 48.0

# Per-server speeds (GB/s per direction), for the servers whose links are not DGCL's V100-era ones.
# NVLink: one link's effective bandwidth as NCCL's topology model rates it (src/graph/topo.h:
# SM80_NVLINK_BW 20.0, SM90_NVLINK_BW 20.6): NVLink3 and NVLink4 run 25 GB/s per link and direction
# on the wire, of which about 20 carry data with the SMs' 128-byte payloads (S. Jeaugey, NVIDIA,
# github.com/NVIDIA/nccl-tests/issues/149). NICs: ConnectX-6 HDR 200 Gb/s = 25 GB/s (DGX A100) and
# ConnectX-7 NDR 400 Gb/s = 50 GB/s (HGX H100).
SERVER_SPEEDS = {
    "dgx-a100": {"nv1": 20.0, "pcie": PCIE_GEN4_GBPS, "ib": 25.0},
    "hgx-h100": {"nv1": 20.6, "pcie": PCIE_GEN5_GBPS, "ib": 50.0},
    # MMA's 8 x H20 server (arXiv 2512.16056): a GPU's PCIe gen5 x16 link at its native single-path
    # copy, 245 GB/s / 4.62 = 53.0 GB/s; the sockets' Infinity Fabric at 300 GB/s per direction (half
    # the low end of the paper's measured 600-750 GB/s, both directions together).
    "hgx-h20": {"nv1": 20.6, "pcie": 53.0, "ib": 50.0, "qpi": 300.0},
}
# hgx-h20: a PCIe switch's x16 gen5 uplink to its CPU, the top of MMA's measured 52-60 GB/s for a
# PCIe 5.0 x16 link (its Table 1); two GPUs share it. Not a published figure for that server.
H20_UPLINK_GBPS = 60.0
# leo-fnic, the thesis's F-NIC testbed host (section 6.4.1): the FPGA board's PCIe gen3 x16 to the
# host (DGCL's measured gen3 x16 rate, the ``pcie`` speed key) and its 100 GbE port, 12.5 GB/s, which
# bounds what reaches the accelerator logic from the NIC logic beside it on the same chip.
FNIC_ONCHIP_GBPS = 12.5
LATENCY_US = {
    "nvlink": 1.0,
    "nvswitch": 1.0,
    "pcie": 1.5,
    "qpi": 1.0,
    "infiniband": 2.0,
    "ethernet": 10.0,
    "shared_memory": 0.5,
    "loopback": 0.1,
}

# DGX-1 / P3.16xlarge NVLink wiring in nvidia-smi numbering (hybrid cube-mesh).
DGX1_NV2 = ((0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7))
DGX1_NV1 = ((0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7))

_SPEED_KEY = {"infiniband": "ib", "shared_memory": "shm"}  # link kinds whose speed key is not their name
_KIND_KEYS = {"nvlink": ("nv1", "nv2"), "nvswitch": ("nv1",)}  # link kinds priced by other speed keys
DEFAULTS_SOURCE, OVERRIDE_SOURCE = "DGCL's defaults", "overridden"


@dataclass(frozen=True)
class PresetSpeeds:
    """The link speeds a preset is built with and where each comes from
    (:func:`~commgraph.topology.presets.preset_speeds`).

    Args:
        speeds: GB/s per direction by key of :data:`DEFAULT_SPEEDS` (every key).
        sources: per key, :data:`DEFAULTS_SOURCE`, ``"<server>'s preset"`` (``SERVER_SPEEDS``), a
            named cluster's stated figure (``"hermod-thesis: ..."``) or :data:`OVERRIDE_SOURCE`.
        given: the speeds a named cluster or the user set, over the defaults and the server's own.
    """

    speeds: dict[str, float]
    sources: dict[str, str]
    given: dict[str, float]

    def describe(self, kinds: Iterable[str] | None = None) -> str:
        """One line: each speed key the link ``kinds`` use (all when None) with its GB/s, grouped by
        source, e.g. ``nv1 20.6, pcie 48, ib 50 GB/s (hgx-h100's preset)``."""
        keys = list(self.speeds) if kinds is None else _speed_keys(kinds)
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(self.sources[key], []).append(f"{key} {self.speeds[key]:g}")
        return "; ".join(f"{', '.join(items)} GB/s ({source})" for source, items in groups.items())

    def to_dict(self) -> dict:
        """Plain data: ``{"gbps": {...}, "sources": {...}}``."""
        return {"gbps": dict(self.speeds), "sources": dict(self.sources)}


def _speed_keys(kinds: Iterable[str]) -> list[str]:
    """The speed keys that price links of ``kinds``, in :data:`DEFAULT_SPEEDS` order."""
    used = {key for kind in kinds for key in _KIND_KEYS.get(kind, (_SPEED_KEY.get(kind, kind),))}
    return [key for key in DEFAULT_SPEEDS if key in used]


def make_link(a: str, b: str, kind: str, count: int = 1, speeds: dict[str, float] = DEFAULT_SPEEDS) -> Link:
    """A link of ``kind`` with the speed and latency the tables above give it.

    Args:
        a, b: the joined devices' ids.
        kind: one of :data:`~commgraph.topology.LINK_KINDS`.
        count: physical links in the entry: an ``nvlink`` pair of 2 gets ``nv2``, else ``count x
            nv1``; an ``nvswitch`` port entry gets ``count x nv1``.
        speeds: GB/s per direction by key (:data:`DEFAULT_SPEEDS`).
    """
    if kind == "nvlink":
        bandwidth = speeds["nv2"] if count == 2 else count * speeds["nv1"]
    elif kind == "nvswitch":
        bandwidth = count * speeds["nv1"]
    else:
        bandwidth = speeds[_SPEED_KEY.get(kind, kind)]
    return Link(a, b, kind, count, bandwidth, LATENCY_US[kind])


class Builder:
    """Collects one topology's devices and links; ``prefix`` keeps server ids apart in clusters."""

    def __init__(self, rule: PresetSpeeds):
        self.rule = rule
        self.speeds = dict(rule.speeds)
        self.given = rule.given
        self.devices: list[Device] = []
        self.links: list[Link] = []

    def device(self, device_id: str, kind: str, host: str) -> str:
        self.devices.append(Device(device_id, kind, host))
        return device_id

    def link(self, a: str, b: str, kind: str, count: int = 1) -> None:
        self.links.append(make_link(a, b, kind, count, self.speeds))

    def build(self, name: str, gpu_forwarding: bool = False) -> Topology:
        return Topology(name=name, devices=self.devices, links=self.links, gpu_forwarding=gpu_forwarding)


# -- single servers: each adds one host and returns its NICs (for clusters) ------------------------


def _pcie_tree(
    b: Builder, p: str, host: str, gpus: int, per_switch: int, sockets: int, nics_per_switch: int = 0
) -> list[str]:
    """GPUs ``per_switch`` to a PCIe switch, switches spread evenly over CPU sockets joined by QPI.
    Returns the NICs, ``nics_per_switch`` under each switch, or one under cpu0 if that is 0."""
    gpu_ids = [b.device(f"{p}gpu{g}", "gpu", host) for g in range(gpus)]
    cpus = [b.device(f"{p}cpu{s}", "cpu", host) for s in range(sockets)]
    for s in range(1, sockets):
        b.link(cpus[s - 1], cpus[s], "qpi")
    switches = gpus // per_switch
    nics = []
    for w in range(switches):
        switch = b.device(f"{p}pcie{w}", "pcie_switch", host)
        b.link(switch, cpus[w * sockets // switches], "pcie")
        for gpu in gpu_ids[w * per_switch : (w + 1) * per_switch]:
            b.link(gpu, switch, "pcie")
        for _ in range(nics_per_switch):
            nics.append(b.device(f"{p}nic{len(nics)}", "nic", host))
            b.link(nics[-1], switch, "pcie")
    if not nics:
        nics.append(b.device(f"{p}nic0", "nic", host))
        b.link(nics[0], cpus[0], "pcie")
    return nics


def _dgx1(b: Builder, p: str, host: str) -> list[str]:
    nics = _pcie_tree(b, p, host, gpus=8, per_switch=2, sockets=2, nics_per_switch=1)
    for pairs, count in ((DGX1_NV2, 2), (DGX1_NV1, 1)):
        for i, j in pairs:
            b.link(f"{p}gpu{i}", f"{p}gpu{j}", "nvlink", count)
    return nics


def _p3_8xlarge(b: Builder, p: str, host: str) -> list[str]:
    nics = _pcie_tree(b, p, host, gpus=4, per_switch=2, sockets=1)
    for pairs, count in ((DGX1_NV2, 2), (DGX1_NV1, 1)):
        for i, j in pairs:
            if i < 4 and j < 4:
                b.link(f"{p}gpu{i}", f"{p}gpu{j}", "nvlink", count)
    return nics


def _p2_16xlarge(b: Builder, p: str, host: str) -> list[str]:
    """8 K80 boards of 2 GPUs behind the board's PCIe switch; 4 boards under each of two central
    PCIe switches joined by one x16 link; host memory (cpu0) and the NIC hang off central switch 0."""
    gpus = [b.device(f"{p}gpu{g}", "gpu", host) for g in range(16)]
    central = [b.device(f"{p}pcie_c{c}", "pcie_switch", host) for c in range(2)]
    b.link(central[0], central[1], "pcie")
    for board in range(8):
        switch = b.device(f"{p}pcie_b{board}", "pcie_switch", host)
        b.link(switch, central[board // 4], "pcie")
        for gpu in gpus[2 * board : 2 * board + 2]:
            b.link(gpu, switch, "pcie")
    cpu = b.device(f"{p}cpu0", "cpu", host)
    b.link(cpu, central[0], "pcie")
    nic = b.device(f"{p}nic0", "nic", host)
    b.link(nic, cpu, "pcie")
    return [nic]


def _pcie_8gpu_qpi(b: Builder, p: str, host: str) -> list[str]:
    return _pcie_tree(b, p, host, gpus=8, per_switch=2, sockets=2)


def _nvswitch_server(ports: tuple[int, ...]) -> Callable[[Builder, str, str], list[str]]:
    """8 GPUs, each joined to every NVSwitch with ``ports[s]`` links; 4 PCIe switches with 2 GPUs
    and 2 NICs each, 2 per CPU socket (DGX A100 / HGX H100 layout; sources and speeds: the module
    docstring)."""

    def build(b: Builder, p: str, host: str) -> list[str]:
        nics = _pcie_tree(b, p, host, gpus=8, per_switch=2, sockets=2, nics_per_switch=2)
        switches = [b.device(f"{p}nvswitch{s}", "nvswitch", host) for s in range(len(ports))]
        for g in range(8):
            for switch, count in zip(switches, ports):
                b.link(f"{p}gpu{g}", switch, "nvswitch", count)
        return nics

    return build


def _hgx_h20(b: Builder, p: str, host: str) -> list[str]:
    """The HGX layout (as ``hgx-h100``) with MMA's H20 figures: GPU PCIe links at the native copy
    rate, PCIe switch uplinks at :data:`H20_UPLINK_GBPS` (or the user's ``pcie`` speed)."""
    nics = _nvswitch_server((5, 4, 4, 5))(b, p, host)
    uplink, cpus = b.given.get("pcie", H20_UPLINK_GBPS), {f"{p}cpu0", f"{p}cpu1"}
    b.links = [
        replace(link, bandwidth_gbps=uplink) if link.kind == "pcie" and {link.a, link.b} & cpus else link
        for link in b.links
    ]
    return nics


def _leo_fnic(b: Builder, p: str, host: str) -> list[str]:
    """The thesis's F-NIC host (section 6.4.1): an 8-core Xeon Silver 4110 (``cpu0``, its memory
    holding the key-value store's values) and a Xilinx VU35P board carrying both the RDMA NIC logic
    (``nic0``) and the accelerator logic (``fpga0``), off-path: the NIC reaches the accelerator on
    the chip and host memory over the board's PCIe gen3 x16."""
    cpu = b.device(f"{p}cpu0", "cpu", host)
    nic = b.device(f"{p}nic0", "nic", host)
    fpga = b.device(f"{p}fpga0", "accelerator", host)
    b.link(nic, cpu, "pcie")
    b.links.append(Link(nic, fpga, "loopback", 1, FNIC_ONCHIP_GBPS, LATENCY_US["loopback"]))
    return [nic]


SERVERS: dict[str, Callable[[Builder, str, str], list[str]]] = {
    "dgx1-v100": _dgx1,
    "p3.16xlarge": _dgx1,
    "p3.8xlarge": _p3_8xlarge,
    "p2.16xlarge": _p2_16xlarge,
    "pcie-8gpu-qpi": _pcie_8gpu_qpi,
    "dgx-a100": _nvswitch_server((2, 2, 2, 2, 2, 2)),
    "hgx-h100": _nvswitch_server((5, 4, 4, 5)),
    "hgx-h20": _hgx_h20,
    "leo-fnic": _leo_fnic,
}


def localhost(b: Builder, workers: int, name: str) -> Topology:
    """``workers`` processes on one CPU machine, exchanging through shared memory (a star)."""
    if workers < 1:
        raise TopologyError(f"{name}: need at least 1 worker")
    cpus = [b.device(f"cpu{w}", "cpu", "localhost") for w in range(workers)]
    hub = b.device("shm", "switch", "localhost")
    for cpu in cpus:
        b.link(cpu, hub, "shared_memory")
    return b.build(name)


def server_wiring(name: str) -> Callable[[Builder, str, str], list[str]]:
    if name not in SERVERS:
        raise TopologyError(f"unknown server preset {name!r}; choose one of {', '.join(SERVERS)}")
    return SERVERS[name]
