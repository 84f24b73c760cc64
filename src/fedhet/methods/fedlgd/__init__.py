"""FedLGD (Huang et al.): declarations (torch-free). Not implemented yet: cells that use them
print "pending" (the method and its settings: shared/specs/fedlgd.md)."""

from fedhet.declare import Method

DECLARATIONS = [
    Method(
        name="distilled",
        kind="plugin",
        summary="clients train on their cached local virtual data (distribution matching)",
        implemented=False,
    ),
    Method(
        name="fedlgd",
        kind="plugin",
        summary="FedLGD (Huang et al.): local-global distillation with federated gradient "
        "matching",
        implemented=False,
    ),
]
