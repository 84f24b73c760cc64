"""Virtual datasets for VHL: separable images that carry no information about natural data.

```python
from fedhet.virtual import make_virtual_dataset, load_or_make_virtual, virtual_grid_png

x, y = make_virtual_dataset("stylegan", 10, 200, 32, 3, seed=0)    # uint8, int64
vd = load_or_make_virtual({"kind": "stylegan", "num_classes": 10, "size": 32, "channels": 3},
                          root="resources/datasets")                # cached, checksummed
virtual_grid_png(vd.x, vd.y, "figures/virtual_stylegan.png", per_class=8)
```

Kinds: `stylegan` (untrained StyleGAN-v2), `noise` (upsampled Gaussian noise), `cnn` (one random
CNN decoder per class), `tinyimagenet10` (a class subset of a real dataset); see
`fedhet.virtual.generators` for what each one does and which settings were assumed, and
`fedhet.virtual.spec` for the options and their defaults.

Importing this package does not import torch (the settings, keys and paths in
`fedhet.virtual.spec` are torch-free); the generators load it when first used.
"""

from __future__ import annotations

from typing import Any

from fedhet.virtual.spec import (
    DEFAULT_IMAGES_PER_CLASS,
    KINDS,
    plugin_settings,
    resolve_options,
    resolve_settings,
    settings_for_run,
    virtual_key,
    virtual_path,
)

_LAZY = {
    "VirtualData": "fedhet.virtual.core",
    "load_or_make_virtual": "fedhet.virtual.core",
    "make_virtual_dataset": "fedhet.virtual.core",
    "to_uint8": "fedhet.virtual.core",
    "grid_array": "fedhet.virtual.grid",
    "virtual_grid_png": "fedhet.virtual.grid",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedhet.virtual' has no attribute '{name}'")


__all__ = [
    "DEFAULT_IMAGES_PER_CLASS",
    "KINDS",
    "VirtualData",
    "grid_array",
    "load_or_make_virtual",
    "make_virtual_dataset",
    "plugin_settings",
    "resolve_options",
    "resolve_settings",
    "settings_for_run",
    "to_uint8",
    "virtual_grid_png",
    "virtual_key",
    "virtual_path",
]
