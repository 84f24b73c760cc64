"""Which torch device a run uses."""

from __future__ import annotations

import torch

from fedhet.declare import ConfigError


def pick_device(spec: str) -> torch.device:
    """`auto` → the first visible CUDA device, else CPU; anything else is taken literally."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"runtime.device is '{spec}' but no CUDA device is visible; use 'cpu' or 'auto'")
    return device
