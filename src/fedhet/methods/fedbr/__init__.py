"""FedBR (Guo et al., ICML 2023) and its comparison set: declarations (torch-free). Not
implemented yet: cells that use them print "pending"."""

from fedhet.declare import Method

_PENDING = {
    "fedbr": ("plugin", "FedBR (Guo et al., ICML 2023): pseudo-data and min-max contrastive "
              "debiasing of local learning"),
    "fedntd": ("plugin", "FedNTD (Lee et al., 2022): not-true distillation"),
    "feddecorr": ("plugin", "FedDecorr (Shi et al., 2023): feature decorrelation"),
    "fedmix": ("plugin", "FedMix (Yoon et al., 2021): mean-augmented federated learning"),
    "mixup": ("plugin", "Mixup (Zhang et al., 2018) on local batches"),
    "dann": ("plugin", "DANN (Ganin et al., 2015): a client discriminator, gradient reversal"),
    "fedcm": ("algorithm", "FedCM (Xu et al., 2021): client momentum towards the global update"),
    "groupdro": ("algorithm", "GroupDRO (Sagawa et al., 2019): server re-weighting by loss"),
    "local": ("algorithm", "Local-only training: no averaging, each client's own model"),
}

DECLARATIONS = [
    Method(name=name, kind=kind, summary=summary, implemented=False)
    for name, (kind, summary) in _PENDING.items()
]
