"""FedImpro (Tang et al., ICLR 2024): declaration (torch-free). Not implemented yet: cells that
use it print "pending" (the method and its settings: shared/specs/fedimpro.md)."""

from fedhet.declare import Method

DECLARATIONS = [
    Method(
        name="fedimpro",
        kind="plugin",
        summary="FedImpro (Tang et al., ICLR 2024): shared per-class feature distributions, "
        "decoupled high-level training",
        implemented=False,
    )
]
