"""Keep freed CPU memory mapped for reuse instead of handing it back to the system.

With its default settings glibc's malloc serves large blocks (activations, their gradients) from
freshly mapped pages and returns them on free, so every training step page-faults its
activations in anew: about 2,500 faults a step for the demo's ConvNet, a quarter of the step's
time on one core. Raising the mmap and trim thresholds keeps those pages in the heap, where the
next step reuses them. Only where memory comes from changes, not the arithmetic: the numbers
stay the same bit for bit.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's maximum: blocks below it come from the heap
TRIM_THRESHOLD = 512 << 20  # free memory kept at the top of the heap before it is returned

_kept = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); False where the C
    library has no `mallopt` (not glibc), whose allocator then keeps its own defaults."""
    global _kept
    if not _kept:
        try:
            mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
        except (OSError, AttributeError, TypeError):
            return False
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        _kept = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    return _kept
