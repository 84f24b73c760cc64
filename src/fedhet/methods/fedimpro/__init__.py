"""FedImpro (Tang et al., ICLR 2024): declaration (torch-free).

The plug-in is in `fedhet.methods.fedimpro.plugin`, its statistics (estimator, aggregation,
sampling, loss weight) in `fedhet.methods.fedimpro.statistics`. The paper's Eqs. 5-7 and
Algorithm 1 were lost from its text; every parameter below says which reading it takes: "paper"
(the text), "code" (the authors' public code), "assumed" (neither). Where the two disagree, the
other reading is one option away; the FedImpro report's item `x1` compares them.
"""

from __future__ import annotations

from fedhet.declare import Method, Param

SCHEDULES = ("gradual2half", "concat", "gradual", "gradualhalfhalf", "constant")

DECLARATIONS = [
    Method(
        name="fedimpro",
        kind="plugin",
        summary="FedImpro (Tang et al., ICLR 2024): shared per-class feature distributions, "
        "decoupled high-level training",
        module="fedhet.methods.fedimpro.plugin",
        cuda_graph=(
            "draws its synthetic features from a per-client generator inside the step, "
            "updates a local estimate made anew for each client, and weighs the losses by a "
            "float that changes each round"
        ),
        version=1,
        params={
            "split": Param(
                2,
                "where the model splits into the low-level φ and the high-level θ: a split-point "
                "name or 1-based position (code: ResNet layer2 = 2; `penultimate` = code layer4)",
                kind="any",
            ),
            "estimator_weight": Param(
                "paper",
                "weight w of a batch in the moving average of the class statistics: paper = "
                "n_c/N_c (class count in the batch over the class size; the code's evident "
                "intent), code = min(1, D/5000) (the code's bug: D is the feature dimension), "
                "or a number in (0, 1]",
                kind="any",
            ),
            "std_cap": Param(
                0.1, "code: initial σ and elementwise upper clip of every σ; null = no cap",
                kind="number", above=0, nullable=True,
            ),
            "sample_from": Param(
                "global",
                "global = the round's received shared estimate (paper Fig. 1); local = the "
                "client's running estimate (code)",
                choices=("global", "local"),
            ),
            "fake_per_class": Param(
                None,
                "sampled features per class a step; null = B//C + 1 (code, ≈ one per real "
                "sample: Remark 4.2); 0 = off (the run is its base algorithm's)",
                kind="int", at_least=0,
            ),
            "schedule": Param(
                "gradual2half",
                "loss weight of the sampled features: gradual2half = CE_r + (t/T_w)·CE_f "
                "(code's main command, uncapped); concat = CE over [real; sampled] (Eq. 5 "
                "weighted by sample sizes); gradual = (1−w)·CE_r + w·CE_f, w = t/T_w ≤ 1; "
                "gradualhalfhalf = the same with w = t/(2T_w) ≤ 0.5 (code's FEMNIST commands); "
                "constant = CE_r + weight·CE_f",
                choices=SCHEDULES,
            ),
            "weight_ramp_epochs": Param(
                500, "code: T_w, in local epochs elapsed before the round; scales shrink it",
                kind="number", above=0,
            ),
            "weight_cap": Param(
                None, "upper bound of the schedule's weight; null = the schedule's own (code)",
                kind="number", at_least=0,
            ),
            "weight": Param(1.0, "the weight of the `constant` schedule (assumed)", at_least=0),
            "aggregate": Param(
                "uniform",
                "server merge of the clients' estimates: uniform (code default: the mean of μ_m "
                "and of σ_m) | samples (weights n_m/Σn) | pooled (class-count weights and the "
                "between-client variance; needs class counts, which App. D says are not shared)",
                choices=("uniform", "samples", "pooled"),
            ),
            "noise": Param(
                0.0, "σ_ε of the Gaussian noise added to each client's μ and σ before the merge "
                "(Table 7; code option `fed_split_client_mean_DP`); σ clamped at 0 afterwards",
                at_least=0,
            ),
            "forward": Param(
                "joint",
                "joint = one pass of [real; sampled] through θ (code: BatchNorm in θ couples "
                "them); separate = two passes (no coupling)",
                choices=("joint", "separate"),
            ),
        },
    )
]
