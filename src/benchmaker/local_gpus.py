"""How many CLIP jobs may share this host at once: the local ``gpu`` resource of profiles/default.

Every job that runs a model asks for ``gpu=1`` (rules/cluster.smk ``gpu_resources``). On a host with a
GPU the default workflow profile offers one, so model jobs take turns on it (``--resources gpu=2``
for two). On a host with none the model jobs run on the CPU, and a cap of one would only make them
wait for each other while cores are idle (the offline example's two vision shards and its evaluate
system ran one after the other): there the profile offers one slot per CPU, and ``--cores`` limits
them like any other job. Cheap on purpose (no torch import): the profile is read on every Snakemake
start.
"""

from __future__ import annotations

import os
import platform
import sys

__all__ = ["gpu_slots", "has_gpu"]

# device files of the GPU drivers torch can use: NVIDIA (CUDA), AMD (ROCm), WSL's GPU paravirtualisation
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def has_gpu() -> bool:
    """Whether this host has a GPU a CLIP job could use (``similarity.device: auto``): an NVIDIA / AMD
    / WSL GPU device, or Apple silicon (MPS)."""
    if sys.platform == "darwin":
        return platform.machine() == "arm64"
    return any(os.path.exists(p) for p in _GPU_DEVICES)


def gpu_slots() -> int:
    """The ``gpu`` resource for local runs: 1 with a GPU, the CPU count without one."""
    return 1 if has_gpu() else max(1, os.cpu_count() or 1)
