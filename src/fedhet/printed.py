"""How datasets, models and methods are written in text a reader sees (the notes under tables and
figures): the papers' names for their datasets and models, and words for the offline stand-ins.
A name not listed here is printed as it is."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

DATASETS = {
    "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "cifar10c": "CIFAR-10-C",
    "cifar10c_clients": "CIFAR-10-C", "cinic10": "CINIC-10", "digits5": "DIGITS",
    "femnist": "FEMNIST", "fmnist": "FMNIST", "fmnist_corrupted": "corrupted FMNIST",
    "mnist": "MNIST", "mnistm": "MNIST-M", "pacs": "PACS", "retina": "RETINA", "svhn": "SVHN",
    "synthdigits": "SynthDigits", "tinyimagenet": "Tiny-ImageNet", "usps": "USPS",
    # the offline stand-ins (fedhet.data.standins and friends)
    "digits10": "handwritten digits", "digits100": "100 classes of digit pairs",
    "digits_writers": "digits by synthetic writers", "digits_domains": "digits in {domains}",
    "digits_corrupted": "corrupted colour digits",
}

MODELS = {
    "cct": "CCT", "cnn4": "4-block CNN", "convnet": "ConvNet", "mobilenetv2": "MobileNetV2",
    "resnet10": "ResNet-10", "resnet18": "ResNet-18", "resnet18in": "ResNet-18",
    "resnet34": "ResNet-34", "resnet50": "ResNet-50", "simplecnn": "simple CNN",
    "vgg9": "VGG-9", "vgg11": "VGG-11",
}

# plug-ins whose parameters a scale changes
METHODS = {"vhl": "VHL", "fedlgd": "FedLGD", "fedimpro": "FedImpro", "feddf": "FedDF",
           "fedbr": "FedBR", "distilled": "the baselines' distilled data"}

# plug-in parameters a scale changes → words ("<plug-in>.<param>" first, then "<param>");
# others are named by their declaration's meaning
PARAMS = {
    "vhl.virtual_per_class": "virtual images per class",
    "vhl.vftl_steps": "VFTL pre-training steps",
    "vhl.virtual_options.dataset": "real images as virtual data",
    "ipc": "local virtual images per class",
    "server_ipc": "global virtual images per class",
    "warmup_steps": "distribution-matching iterations of the initialisation",
    "real_batch": "real images per class in a matching iteration",
    "lr_img": "learning rate of the virtual images",
    "embed_width": "width of the matching ConvNet",
    "distill_every": "rounds between global distillations",
    "distill_times": "distillation rounds |τ|",
    "fedlgd.local_steps": "matching steps of a client in a distillation round",
    "server_steps": "gradient-matching steps of the server",
    "feddf.steps": "distillation steps a round at most",
    "feddf.eval_every": "distillation steps between validations",
    "feddf.unlabeled": "unlabeled data",
    "fedimpro.weight_ramp_epochs": "local epochs of the feature-loss ramp",
    "fedbr.proxy": "Mixture's proxy data",
}

WIDTHS = {0.5: "half-width", 0.25: "quarter-width", 0.125: "eighth-width",
          0.0625: "sixteenth-width"}


def dataset(name: str, options: Mapping[str, Any] | None = None) -> str:
    """A dataset as a reader knows it: "CIFAR-10", "digits in 4 styles"."""
    domains = (options or {}).get("domains")
    styles = f"{len(domains)} styles" if domains else "5 styles"
    return DATASETS.get(name, name).format(domains=styles)


def stand_in(name: str, options: Mapping[str, Any] | None = None) -> str:
    """An offline stand-in as it ran, told from the others that stand in at the same scale:
    "colour handwritten digits (16 px, 240 training images a class)"."""
    opts = options or {}
    colour = {1: "grey ", 3: "colour "}.get(opts.get("channels"), "")
    details = [f"{opts['size']} px"] if opts.get("size") else []
    if opts.get("train_per_class"):
        details.append(f"{number(opts['train_per_class'])} training images a class")
    return colour + dataset(name, opts) + (f" ({', '.join(details)})" if details else "")


def model(name: str, width: float = 1.0) -> str:
    """A model and its width: "ResNet-18", "quarter-width ConvNet", "0.3×-width ConvNet"."""
    printed = MODELS.get(name, name)
    if float(width) == 1.0:
        return printed
    return f"{WIDTHS.get(float(width), f'{float(width):g}×-width')} {printed}"


def method(name: str) -> str:
    return METHODS.get(name, name)


def param(plugin: str, name: str) -> str | None:
    """A plug-in parameter in words, None where this module does not know it."""
    return PARAMS.get(f"{plugin}.{name}") or PARAMS.get(name)


def number(value: Any) -> str:
    """A setting's value: thousands separated, floats as written ("10,000", "0.05")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DATASETS.get(value, str(value)) if isinstance(value, str) else str(value)
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:g}"


def join_labels(labels: Iterable[str]) -> str:
    """Printed values one after the other, each in parentheses where one has a comma itself
    ("(α=0.1, E=1, K=10), (α=0.05, E=1, K=10)")."""
    labels = list(labels)
    if any("," in label for label in labels):
        labels = [f"({label})" for label in labels]
    return ", ".join(labels)


# A symbol with a subscript as the configs write it (F_1, M_c, σ_ε): one Latin or Greek letter,
# "_", then one or two letters or digits, not inside a longer word or a path.
SUBSCRIPT = re.compile(r"(?<![\w/.])([A-Za-zα-ωΑ-Ω])_([A-Za-z0-9α-ω]{1,2})(?![\w/])")
# Greek letters as matplotlib's mathtext names them
MATH_GREEK = {"α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "ε": r"\epsilon",
              "λ": r"\lambda", "μ": r"\mu", "σ": r"\sigma", "τ": r"\tau"}


def subscripts_html(text: str) -> str:
    """HTML `text` with each symbol's subscript set as one (F_1 → F<sub>1</sub>)."""
    return SUBSCRIPT.sub(r"\1<sub>\2</sub>", text)


def subscripts_mathtext(text: str) -> str:
    """`text` with each symbol's subscript set as one in matplotlib's mathtext (F_1 → $F_1$);
    text that already holds mathtext ($) is left as it is."""
    if "$" in text:
        return text

    def math(match: re.Match[str]) -> str:
        base = MATH_GREEK.get(match.group(1), match.group(1))
        sub = "".join(MATH_GREEK.get(c, c) for c in match.group(2))
        return f"${base}_{{{sub}}}$"

    return SUBSCRIPT.sub(math, text)
