"""Phase 1: is this machine able to run the check? Seconds, installs nothing, one line when not.

What is looked at: torch and transformers import (and their versions), torch's CUDA build and the
device the check names, and the memory free there against what the largest target needs (its
weights as built, twice over for activations, caches and the CUDA graphs' pools). Every failure
is one `EnvironmentMissing` line that names what is missing and what to do.
"""

from __future__ import annotations

import importlib.util
import platform
from typing import Any

from ecosim.errors import EcoSimError

# PyPI's Linux x86-64 torch wheel is the CUDA build (its CUDA libraries come as wheels too), so the
# project's own pin installs it on a bare GPU machine with Python.
INSTALL = "python -m pip install -e '.[models]'"


class EnvironmentMissing(EcoSimError):
    """What the machine lacks, in one line (exit status 2)."""


def check_environment(device: str, need_bytes: float) -> dict[str, Any]:
    """The environment's facts (versions, device, memory) or EnvironmentMissing naming what is missing."""
    for mod in ("torch", "transformers"):
        if importlib.util.find_spec(mod) is None:
            raise EnvironmentMissing(f"{mod} is not installed; on a bare machine: {INSTALL}")
    import torch
    import transformers

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "transformers": transformers.__version__, "torch_cuda": torch.version.cuda,
                           "device_kind": "cuda" if device.startswith("cuda") else "cpu"}
    if device.startswith("cuda"):
        if torch.version.cuda is None:
            base = torch.__version__.split("+")[0]
            raise EnvironmentMissing(f"torch {torch.__version__} is a build without CUDA; install PyPI's CUDA build: "
                                     f"python -m pip install --force-reinstall torch=={base}")
        if not torch.cuda.is_available():
            raise EnvironmentMissing(f"no CUDA device is visible (torch {torch.__version__}, CUDA {torch.version.cuda}): "
                                     "no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it")
        dev = torch.device(device)
        index = dev.index or 0
        if index >= torch.cuda.device_count():
            raise EnvironmentMissing(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
        free, total = torch.cuda.mem_get_info(index)
        props = torch.cuda.get_device_properties(index)
        env.update(device=props.name, memory_bytes=float(total), free_bytes=float(free),
                   capability=f"{props.major}.{props.minor}", driver_cuda=torch.version.cuda)
    else:
        from validate.calibrate import cpu_name, memory_bytes

        free = total = memory_bytes()
        env.update(device=cpu_name(), memory_bytes=float(total), free_bytes=float(free), threads=torch.get_num_threads())
    if free and free < need_bytes:
        raise EnvironmentMissing(f"too little memory on {env['device']}: {free / 2**30:.1f} GiB free, the targets need "
                                 f"about {need_bytes / 2**30:.1f} GiB (--small needs almost none)")
    env["need_bytes"] = float(need_bytes)
    return env
