"""DANN — domain-adversarial training (Ganin & Lempitsky, ICML 2015) with the clients as the
domains, one of FedBR's comparison set: declaration (torch-free). The plug-in is in
`fedhet.methods.dann.plugin`."""

from __future__ import annotations

from fedhet.declare import Method, Param

DECLARATIONS = [
    Method(
        name="dann",
        kind="plugin",
        summary="DANN (Ganin et al., 2015): a discriminator of the client id on the penultimate "
        "features, trained against them through gradient reversal",
        module="fedhet.methods.dann.plugin",
        cuda_graph=True,
        params={
            "lam": Param(
                0.01, "λ_d, the gradient-reversal scale: the features receive −λ_d times the "
                "discriminator's gradient (code: FedBR's DANN lambda 0.01; paper grid 0.01, "
                "0.1, 1); 0 = the model trains as its base algorithm's (D still trains)",
                at_least=0,
            ),
            "width": Param(
                256, "hidden width of the discriminator MLP d → w → w → clients (paper App. A: "
                "three-layer MLP of width 256; code: mlp_width 256, mlp_depth 3)",
                kind="int", at_least=1,
            ),
        },
    )
]
