"""A method written outside fedhet, as a user's package would hold it: the declaration
(torch-free) here, the plug-in in `fedhet_toy.plugin`. The tests install it through an entry
point in group `fedhet.methods` naming this module."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="logitpen",
        kind="plugin",
        summary="logit penalty: weight · mean squared logit added to each local step's loss",
        module="fedhet_toy.plugin",
        params={"weight": Param(0.01, "weight of the mean squared logit", at_least=0)},
    )
]
