"""Building the local topology from ``nvidia-smi topo -m``, or ``localhost-cpu:N`` without GPUs.

The matrix says how each pair of GPUs/NICs is connected: ``NV#`` (# bonded NVLinks), ``PIX``/``PXB``
(through PCIe switches only: same switch tree), ``PHB``/``NODE`` (through the CPU's host bridges: same
socket), ``SYS`` (across the socket interconnect). A GPU-GPU cell shows NV# when NVLink exists and so
hides the PCIe relation; the GPU-NIC cells and the CPU affinity column recover it. When a GPU's NVLink
counts to its peers add up to more than a GPU has (18 on H100), the links go through NVSwitches, and
we model one NVSwitch fabric that each GPU joins with its # links.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from commgraph.errors import TopologyError
from commgraph.topology.model import Device, Link, Topology
from commgraph.topology.presets import load_preset
from commgraph.topology.servers import make_link

MAX_NVLINKS_PER_GPU = 18
_SAME_SWITCH = {"PIX", "PXB"}
_SAME_SOCKET = {"PIX", "PXB", "PHB", "NODE"}
_RELATIONS = _SAME_SOCKET | {"SYS", "X"}


def parse_topo_matrix(text: str, name: str = "detected") -> Topology:
    """Topology of one server from the text ``nvidia-smi topo -m`` prints."""
    labels, rows, affinity = _read_matrix(text)
    gpus = [label for label in labels if label.startswith("GPU")]
    if not gpus:
        raise TopologyError("nvidia-smi topo -m output lists no GPUs")
    endpoints = [label for label in labels if label in rows]

    def relation(a: str, b: str) -> str:
        return rows[a][labels.index(b)]

    socket_of = _union_find(
        endpoints,
        lambda a, b: relation(a, b) in _SAME_SOCKET or (a in affinity and affinity.get(a) == affinity.get(b) != ""),
    )
    switch_of = _union_find(endpoints, lambda a, b: relation(a, b) in _SAME_SWITCH)

    devices, links = [], []
    ids = {label: _device_id(label, gpus, endpoints) for label in endpoints}
    for label in endpoints:
        devices.append(Device(ids[label], "gpu" if label in gpus else "nic"))
    sockets = sorted(set(socket_of.values()), key=endpoints.index)
    cpu = {root: f"cpu{i}" for i, root in enumerate(sockets)}
    devices += [Device(c, "cpu") for c in cpu.values()]
    for i, a in enumerate(sockets):
        for b in sockets[i + 1 :]:
            links.append(make_link(cpu[a], cpu[b], "qpi"))

    groups: dict[str, list[str]] = {}
    for label in endpoints:
        groups.setdefault(switch_of[label], []).append(label)
    switch_count = 0
    for members in groups.values():
        parent = cpu[socket_of[members[0]]]
        if len(members) > 1:
            parent_switch = f"pcie{switch_count}"
            switch_count += 1
            devices.append(Device(parent_switch, "pcie_switch"))
            links.append(make_link(parent_switch, parent, "pcie"))
            parent = parent_switch
        links += [make_link(ids[m], parent, "pcie") for m in members]

    links += _nvlinks(gpus, relation, devices)
    return Topology(name=name, devices=devices, links=links)


_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")  # terminal colour and underline codes


def _read_matrix(text: str) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """Column labels, the relation cells of each row, and each row's CPU affinity text. The
    terminal codes nvidia-smi underlines its header with (``ESC[4m`` ... ``ESC[0m``) are dropped."""
    lines = [_ESCAPES.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        raise TopologyError("not nvidia-smi topo -m output: no header line starting with GPU0")
    header = [cell.strip() for cell in lines[header_at].split("\t") if cell.strip()]
    labels = [h for h in header if h not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    rows: dict[str, list[str]] = {}
    affinity: dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        if not line.strip() or line.startswith("Legend") or line.startswith("NIC Legend"):
            break
        cells = [cell.strip() for cell in line.split("\t")]
        label, values = cells[0], cells[1:]
        relations = values[: len(labels)]
        if len(relations) < len(labels):
            raise TopologyError(f"nvidia-smi topo -m row {label!r} has {len(relations)} cells, expected {len(labels)}")
        for cell in relations:
            if cell not in _RELATIONS and not re.fullmatch(r"NV\d+", cell):
                raise TopologyError(f"nvidia-smi topo -m row {label!r}: unknown relation {cell!r}")
        rows[label] = relations
        if label.startswith("GPU") and len(values) > len(labels):
            affinity[label] = values[len(labels)]
    return labels, rows, affinity


def _device_id(label: str, gpus: list[str], endpoints: list[str]) -> str:
    if label in gpus:
        return f"gpu{int(label[3:])}"
    nics = [e for e in endpoints if e not in gpus]
    return f"nic{nics.index(label)}"


def _union_find(items: list[str], joined) -> dict[str, str]:
    parent = {item: item for item in items}

    def root(item: str) -> str:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            if joined(a, b):
                ra, rb = root(a), root(b)
                if ra != rb:
                    first, second = sorted((ra, rb), key=items.index)
                    parent[second] = first
    return {item: root(item) for item in items}


def _nvlinks(gpus: list[str], relation, devices: list[Device]) -> list[Link]:
    counts = {(a, b): int(relation(a, b)[2:]) for a in gpus for b in gpus if a != b and relation(a, b).startswith("NV")}
    per_gpu = {g: sum(c for (a, _), c in counts.items() if a == g) for g in gpus}
    if any(total > MAX_NVLINKS_PER_GPU for total in per_gpu.values()):
        devices.append(Device("nvswitch0", "nvswitch"))
        return [
            make_link(f"gpu{int(g[3:])}", "nvswitch0", "nvswitch", max(c for (a, _), c in counts.items() if a == g))
            for g in gpus
            if per_gpu[g]
        ]
    return [make_link(f"gpu{int(a[3:])}", f"gpu{int(b[3:])}", "nvlink", c) for (a, b), c in counts.items() if a < b]


def detect(timeout: float = 30.0) -> Topology:
    """This machine's topology: parsed from ``nvidia-smi topo -m`` when it lists GPUs; else, if
    torch sees CUDA devices (no nvidia-smi, e.g. in some containers), those GPUs behind one PCIe
    switch (their real wiring is unknown); else ``localhost-cpu:N`` with one worker per CPU core."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            result = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TopologyError(f"nvidia-smi topo -m failed: {exc}") from None
        if result.returncode == 0 and "GPU0" in result.stdout:
            return parse_topo_matrix(result.stdout, name="detected")
    gpus = _cuda_device_count()
    if gpus:
        devices = [Device(f"gpu{g}", "gpu") for g in range(gpus)] + [
            Device("pcie0", "pcie_switch"),
            Device("cpu0", "cpu"),
        ]
        links = [make_link(f"gpu{g}", "pcie0", "pcie") for g in range(gpus)] + [make_link("pcie0", "cpu0", "pcie")]
        return Topology(name="detected-cuda", devices=devices, links=links)
    return load_preset(f"localhost-cpu:{os.cpu_count() or 1}")


def _cuda_device_count() -> int:
    """GPUs torch can see (0 when torch or CUDA is absent); imported here only, detection being
    the one place the topology layer asks the machine."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
