"""Seeds derived from (run seed, round, client, purpose), so no random state carries over.

Every random draw of a client's local training is seeded from its own key; a run resumed
from a checkpoint therefore draws exactly what the uninterrupted run drew.
"""

from __future__ import annotations

import hashlib

import torch


def derive_seed(*keys: object) -> int:
    """A 63-bit seed from any tuple of printable keys."""
    digest = hashlib.sha256(repr(keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def generator(device: torch.device, *keys: object) -> torch.Generator:
    """A torch generator on `device` seeded by `derive_seed(*keys)`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*keys))
    return gen


def seed_global(device: torch.device, *keys: object) -> None:
    """Seed torch's global generators (what dropout draws from) by `derive_seed(*keys)`: the
    CPU one, and the CUDA ones on a CUDA device. The same seeding as `torch.manual_seed`,
    without its per-call cost (about 1 ms: it also queues a seed, with a captured stack, for
    every accelerator backend), which adds up over the clients of every round."""
    seed = derive_seed(*keys)
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
