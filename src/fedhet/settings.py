"""Every run setting, declared once: default, meaning, type and range (torch-free, imports
nothing of the package but `fedhet.declare`, so any module may read the defaults).

`fedhet.config` resolves and checks runs against this table and derives the run identity.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fedhet.declare import Param

S = Param
_POSITIVE = {"kind": "int", "at_least": 1}
# Every run setting: default, meaning and what it accepts (`since` > 0: added later, see
# fedhet.declare). A dict is a section; `options` and `params` are free-form mappings checked by
# their consumer (the dataset, the model, the method's declaration).
SETTINGS: dict[str, Any] = {
    "name": S("", "readable prefix of the run id; empty = built from the settings",
              pattern=r"[A-Za-z0-9._+=-]*"),
    "seed": S(0, "seed of the partition, the initial model and all client randomness",
              at_least=0),
    "dataset": {
        "name": S("digits10", "a registered dataset (fedhet.data)"),
        "root": S("resources/datasets", "where datasets are cached"),
        "options": S({}, "dataset-specific, e.g. stand-in channels/size"),
    },
    "partition": {
        "scheme": S("dirichlet", "a partition scheme (fedhet.partition.SCHEMES)"),
        "num_clients": S(10, "clients in the federation", **_POSITIVE),
        "alpha": S(0.1, "Dirichlet concentration (LDA, per-client Dirichlet)", above=0),
        "classes_per_client": S(2, "classes a client holds (n-class schemes)", **_POSITIVE),
        "min_size": S(None, "smallest client; None = the scheme's default", kind="int",
                      at_least=0),
        "cap": S(True, "LDA: clients over N/K get no more of a class (official code)"),
        "root": S("resources/partitions", "where partitions are cached"),
        "file": S(None, "explicit partition file (workflow); None = cached by key", kind="str"),
        "options": S({}, "scheme-specific, e.g. rotation_mode, dominant_fraction, prior"),
    },
    "model": {
        "name": S("simplecnn", "a registered model (fedhet.models)"),
        "width": S(1.0, "multiplier of channel and hidden-layer counts", above=0),
        "options": S({}, "model-specific keyword options"),
    },
    "algorithm": {
        "name": S("fedavg", "a declared algorithm (fedhet.catalog)"),
        "params": S({}, "the algorithm's parameters (its declaration gives the defaults)"),
    },
    "plugins": S([], "list of {name, params}: plug-ins on top of the algorithm, in order"),
    "training": {
        "rounds": S(10, "communication rounds", **_POSITIVE),
        "clients_per_round": S(5, "clients sampled each round", **_POSITIVE),
        "client_fraction": S(None, "share of the clients sampled each round: sets "
                             "clients_per_round to max(1, int(fraction × num_clients)) (FedLGD's "
                             "client ratio, which a scale's client count changes)",
                             kind="number", above=0, at_most=1, since=1),
        "local_epochs": S(1, "passes over the client's data per round", **_POSITIVE),
        "local_steps": S(None, "fixed number of local steps instead of epochs", **_POSITIVE),
        "batch_size": S(64, "local batch size", **_POSITIVE),
        "lr": S(0.01, "client learning rate", above=0),
        "lr_decay": S(1.0, "multiplied into lr every round", above=0),
        "momentum": S(0.0, "client SGD momentum", at_least=0, below=1),
        "weight_decay": S(0.0, "client weight decay", at_least=0),
        "keep_client_optimizer_state": S(False, "clients keep their momentum across rounds"),
        "augment": S("auto", "training augmentation; auto = the dataset's own",
                     choices=("auto", "none", "crop_flip", "crop", "rotate")),
        "centralized": S(False, "one client holding all data, every round"),
        "max_grad_norm": S(None, "clip local gradients to this norm; None = no clipping",
                           kind="number", above=0),
        "vectorise_clients": S(False, "train a round's clients as one stacked model "
                               "(torch.func.vmap; pays on a GPU): the numbers equal one client "
                               "at a time's to float tolerance, hence part of the identity. "
                               "Methods not declared vectorisable, plug-ins, BatchNorm, dropout "
                               "and clipping train one client at a time (logged)", since=1),
    },
    "eval": {
        "every": S(1, "evaluate the global model every this many rounds", **_POSITIVE),
        "batch_size": S(512, "evaluation batch size", **_POSITIVE),
        "client_models": S(False, "also score each round's local client models on the test set",
                           since=1),
        "rotations": S([], "score the test set as the mean over copies rotated by these angles "
                       "(degrees; FedBR's rotated test sets); [] = the test set as it is",
                       items="number", since=1),
    },
    # How and where it runs, what extra it saves: not part of the identity, except the numeric
    # modes (RUNTIME_IDENTITY), which change the numbers.
    "runtime": {
        "device": S("auto", "auto | cpu | cuda | cuda:N", pattern=r"auto|cpu|cuda(:\d+)?|mps"),
        "precision": S("default", "arithmetic of training and evaluation: default = torch's "
                       "own (on a GPU, convolutions in TF32 through cuDNN, matrix products in "
                       "fp32), fp32 = strict fp32 everywhere, tf32 = TF32 convolutions and "
                       "matrix products, bf16 = bf16 autocast (the default's TF32 flags "
                       "beside it). On a CPU default, fp32 and tf32 compute the same; the run "
                       "id still depends on it (ids are made without knowing the device)",
                       choices=("default", "fp32", "tf32", "bf16"), since=1),
        "channels_last": S(False, "channels-last memory format of the model and its inputs, "
                           "on every device (a GPU's tensor cores run it faster)", since=1),
        "deterministic": S(False, "deterministic kernels only (torch.use_deterministic_"
                           "algorithms, cuDNN deterministic and not benchmarking, a fixed "
                           "cuBLAS workspace): on a GPU a stopped run resumes bit for bit and "
                           "two runs agree; an op with no deterministic kernel stops the run. "
                           "CPU runs are deterministic either way", since=1),
        "cudnn_benchmark": S(False, "let cuDNN time its convolution algorithms at each new "
                             "input shape and keep the fastest (torch.backends.cudnn."
                             "benchmark): faster on a GPU, but the choice, and with it the last "
                             "bits, may differ from run to run; not with deterministic. A CPU "
                             "ignores it (the run id still depends on it)", since=1),
        "cuda_graphs": S(True, "on CUDA, capture a client's local step (batch gather, "
                         "augmentation, forward, losses, backward, corrections, SGD step) once per "
                         "batch shape as a CUDA graph and replay it for every step of every "
                         "client: the same kernels without the host's launch cost, the same "
                         "numbers, so not part of the identity; false = eager. Methods not "
                         "declared capturable, and stacked clients, run eager (logged, and in "
                         "provenance.execution); a CPU ignores it"),
        "checkpoint_every": S(10, "rounds between checkpoints", **_POSITIVE),
        "snapshot_rounds": S([], "rounds whose global model is saved", items="int", at_least=1),
        "save_client_models": S([], "rounds whose client models are saved", items="int",
                                at_least=1),
        "log_every": S(1, "rounds between log lines", **_POSITIVE),
        "threads": S(None, "torch threads (of each client being trained); None = torch's "
                     "default", **_POSITIVE),
        "client_workers": S(1, "clients trained at once on CPU, each on `threads` torch "
                            "threads (cores used: their product); the numbers do not depend "
                            "on it", **_POSITIVE),
    },
}
del S

# Runtime settings that change the numbers: part of the run identity, hashed (by `since`) only
# when not at their default, whatever the device (run ids are made without knowing it).
RUNTIME_IDENTITY = ("precision", "channels_last", "deterministic", "cudnn_benchmark")


def _defaults_of(node: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: _defaults_of(value) if isinstance(value, Mapping) else copy.deepcopy(value.default)
        for key, value in node.items()
    }


DEFAULTS: dict[str, Any] = _defaults_of(SETTINGS)
