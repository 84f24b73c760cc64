"""Paper datasets without a stable download: the user places the files, fedhet reads them.

- `synthdigits`, `mnistm` (DIGITS benchmark domains): PNG/JPEG images arranged as
  `<root>/raw/<name>/{train,test}/<digit>/*.png`, folder names `0`–`9`. FedLGD's copies
  also work in the authors' layout: `<root>/raw/synthetic_digits/{imgs_train,imgs_valid}/`
  (SynthDigits) and `<root>/raw/mnistm/{train,test}/` (MNIST-M, the same as ours).
- `retina` (FedLGD's four fundus-photo sites): `<root>/raw/retina/<site>/{train,test}/<class>/*`,
  two classes; each site is a domain (sorted names). The authors' layout
  `<root>/raw/retina_balanced/<site>/{Training,Testing}/<class>/*` works too; there the
  domains follow their order Drishti, kaggle_arima (ACRIMA), RIM, REFUGE.
- `cifar10c` (CIFAR-10-C, Hendrycks & Dietterich 2019): the extracted official archive,
  `<root>/raw/cifar10c/CIFAR-10-C/<corruption>.npy` and `labels.npy`; training images
  are CIFAR-10's, test images the chosen corruption at the chosen severity.
- `pacs` (PACS, Li et al. 2017): the authors' image folders,
  `<root>/raw/pacs/{art_painting,cartoon,photo,sketch}/<class>/*` with the 7 classes; each
  style is a domain, split 80/20 into train/test by a fixed seed.

When the files are missing, DatasetNotAvailable says what goes where; the offline stand-in
for the DIGITS domains is `digits_domains`. Images of other sizes are resized (bilinear)
to option `size` while they are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedhet.data.archives import IMAGE_SUFFIXES, decode_image, stack_split
from fedhet.data.core import DATASETS, Arrays, DatasetNotAvailable, DatasetSpec, fixed_sizes
from fedhet.data.torchvision_sets import (
    CIFAR10_STATS,
    missing_files,
    not_available_message,
    torchvision_split,
)

CIFAR10C_URL = "https://zenodo.org/records/2535967"
CORRUPTIONS = (
    "brightness",
    "contrast",
    "defocus_blur",
    "elastic_transform",
    "fog",
    "frost",
    "gaussian_blur",
    "gaussian_noise",
    "glass_blur",
    "impulse_noise",
    "jpeg_compression",
    "motion_blur",
    "pixelate",
    "saturate",
    "shot_noise",
    "snow",
    "spatter",
    "speckle_noise",
    "zoom_blur",
)
CIFAR10C_PER_SEVERITY = 10_000

PACS_URL = "https://domaingeneralization.github.io/#data"
PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
PACS_CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")
# Images per domain (Li et al. 2017: 9,991 in all), in PACS_DOMAINS order
PACS_DOMAIN_IMAGES = (2048, 2344, 1670, 3929)
PACS_SPLIT_SEED = 2017
# ImageNet's statistics, as FedBR's code normalises PACS (datasets.py, MultipleEnvironment-
# ImageFolder); not PACS's own.
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

Item = tuple[str, str, np.ndarray]


def read_image_folder(folder: Path, size: int) -> Iterator[Item]:
    """(relative path, class folder, image `[3, size, size]`) for every image under `folder`."""
    for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for file in sorted(class_dir.iterdir()):
            if file.suffix.lower() in IMAGE_SUFFIXES:
                yield (
                    str(file.relative_to(folder)),
                    class_dir.name,
                    decode_image(file.read_bytes(), size),
                )


def _require_dirs(name: str, root: Path, dirs: list[Path], layout: str, origin: str) -> None:
    missing = [d for d in dirs if not d.is_dir()]
    if missing:
        raise DatasetNotAvailable(
            f"dataset '{name}' is not on disk (missing {missing[0]}). It must be fetched by hand: "
            f"{origin}. Arrange the files as {layout}, then run "
            f"`fedhet prepare-data --dataset {name} --root {root}`."
        )


def _check_classes(where: Path, classes: list[str], expected: int) -> None:
    if len(classes) != expected:
        raise ValueError(f"{where}: expected {expected} class folders, found {classes}")


# Per DIGITS domain: its (folder, train, test) layouts below `<root>/raw`, ours first, then
# FedLGD's (fedlgd_data.py), and where to get it.
DIGIT_FOLDERS = {
    "synthdigits": (("synthdigits", "train", "test"),
                    ("synthetic_digits", "imgs_train", "imgs_valid")),
    "mnistm": (("mnistm", "train", "test"),),
}
DIGIT_ORIGINS = {
    "synthdigits": "SynthDigits (Ganin & Lempitsky, 2015) is distributed by its authors, "
    "e.g. as FedBN's DIGITS data or FedLGD's (10,000/2,000 images), and has no stable URL",
    "mnistm": "MNIST-M (Ganin et al., 2016) is distributed by its authors, e.g. as FedBN's "
    "DIGITS data or FedLGD's (10,331/209 images); a public copy with other counts "
    "(59,001/9,001) is https://github.com/liyxi/mnist-m/releases (mnist_m_{train,test}"
    ".pt.tar.gz, read as they are by `digits5`, in <root>/raw/mnistm/)",
}


def digit_folders(name: str, root: Path) -> tuple[Path, Path] | None:
    """The (train, test) folders of DIGITS domain `name` in the first layout present."""
    for folder, train, test in DIGIT_FOLDERS[name]:
        base = Path(root) / "raw" / folder
        if (base / train).is_dir() and (base / test).is_dir():
            return base / train, base / test
    return None


def digit_folders_hint(name: str, root: Path, dataset: str) -> str:
    """What DatasetNotAvailable says when DIGITS domain `name` is missing for `dataset`."""
    layouts = " or ".join(
        f"{Path(root) / 'raw' / folder}/{{{train},{test}}}/<digit 0-9>/*.png"
        for folder, train, test in DIGIT_FOLDERS[name]
    )
    return (
        f"dataset '{dataset}' needs {name}, which is not on disk. It must be fetched by "
        f"hand: {DIGIT_ORIGINS[name]}. Arrange the files as {layouts}, then run "
        f"`fedhet prepare-data --dataset {dataset} --root {root}`."
    )


def read_digit_folders(name: str, root: Path, size: int) -> Arrays:
    """DIGITS domain `name` read from its image folders, resized to `size` (RGB)."""
    import torch

    folders = digit_folders(name, root)
    if folders is None:
        raise DatasetNotAvailable(digit_folders_hint(name, root, name))
    train_dir, test_dir = folders
    train = list(read_image_folder(train_dir, size))
    classes = sorted({c for _, c, _ in train})
    _check_classes(train_dir, classes, 10)
    x_train, y_train = stack_split(train, classes, size, str(train_dir.parent))
    x_test, y_test = stack_split(
        read_image_folder(test_dir, size), classes, size, str(train_dir.parent)
    )
    return Arrays(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
        class_names=tuple(classes),
    )


def _digit_folder_builder(name: str):
    """Builder of a DIGITS domain stored as train/test image folders."""

    def build(root: Path, options: dict[str, Any]) -> Arrays:
        return read_digit_folders(name, root, options["size"])

    return build


# RETINA's layouts below `<root>/raw`: (folder, train, test), ours first, then FedLGD's
# (fedlgd_data.py: retina_balanced/<site>/{Training,Testing}/<class>).
RETINA_LAYOUTS = (("retina", "train", "test"), ("retina_balanced", "Training", "Testing"))
# The site folders of FedLGD's layout in the code's (and the paper's table) order.
RETINA_AUTHOR_SITES = ("Drishti", "kaggle_arima", "RIM", "REFUGE")


def _site_order(sites: list[str], authors_layout: bool) -> list[str]:
    """Sorted site names; in FedLGD's layout its four sites first, in the authors' order."""
    if not authors_layout:
        return sorted(sites)
    known = [s for s in RETINA_AUTHOR_SITES if s in sites]
    return known + sorted(s for s in sites if s not in known)


def _retina_layout(root: Path) -> tuple[Path, str, str]:
    """(base folder, train name, test name) of the first RETINA layout whose folder exists;
    ours when none does."""
    for folder, train, test in RETINA_LAYOUTS:
        if (Path(root) / "raw" / folder).is_dir():
            return Path(root) / "raw" / folder, train, test
    folder, train, test = RETINA_LAYOUTS[0]
    return Path(root) / "raw" / folder, train, test


def _build_retina(root: Path, options: dict[str, Any]) -> Arrays:
    """All sites' images; the domain id of a sample is its site's index (sorted names; in
    FedLGD's layout, Drishti, kaggle_arima, RIM, REFUGE as the authors order them)."""
    import torch

    base, train_name, test_name = _retina_layout(root)
    layout = " or ".join(
        f"{Path(root) / 'raw' / folder}/<site>/{{{train},{test}}}/<class>/*.png"
        for folder, train, test in RETINA_LAYOUTS
    ) + " (one folder per site)"
    origin = "FedLGD's retina sites (Drishti, kaggle, RIM, refuge) from their publishers"
    _require_dirs("retina", root, [base], layout, origin)
    sites = _site_order([p.name for p in base.iterdir() if p.is_dir()],
                        base.name == RETINA_LAYOUTS[1][0])
    expected = [base / s / split for s in sites for split in (train_name, test_name)]
    _require_dirs("retina", root, expected if sites else [base / "<site>"], layout, origin)
    size = options["size"]
    items = {split: [] for split in ("train", "test")}
    for d, site in enumerate(sites):
        for split, folder in (("train", train_name), ("test", test_name)):
            items[split] += [
                (f"{d:03d}/{key}", cls, img, d)
                for key, cls, img in read_image_folder(base / site / folder, size)
            ]
    classes = sorted({cls for _, cls, _, _ in items["train"]})
    _check_classes(base, classes, 2)
    out = {}
    for split, rows in items.items():
        rows.sort(key=lambda r: r[0])
        x, y = stack_split([r[:3] for r in rows], classes, size, str(base))
        out[split] = (
            torch.from_numpy(x),
            torch.from_numpy(y),
            torch.tensor([r[3] for r in rows], dtype=torch.long),
        )
    return Arrays(
        out["train"][0],
        out["train"][1],
        out["test"][0],
        out["test"][1],
        class_names=tuple(classes),
        domain_train=out["train"][2],
        domain_test=out["test"][2],
        domain_names=tuple(sites),
    )


def _build_pacs(root: Path, options: dict[str, Any]) -> Arrays:
    """PACS's 4 styles as domains (ids in `PACS_DOMAINS` order), each split train/test.

    PACS has no official train/test split and FedBR's code trains on everything, so the test
    set is a held-out share of every (domain, class) folder: `test_fraction` (0.2, assumed,
    as DomainBed's holdout fraction) of its images, drawn by a generator seeded with
    (PACS_SPLIT_SEED, domain, class) so the split does not depend on the other folders.
    """
    import torch

    fraction = options["test_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
        0 < fraction < 1
    ):
        raise ValueError(
            f"option 'test_fraction' of dataset 'pacs' must be a number between 0 and 1 "
            f"(exclusive), got {fraction!r}"
        )
    base = Path(root) / "raw" / "pacs"
    layout = (
        f"one folder per domain, {', '.join(str(base / d) for d in PACS_DOMAINS)}, each holding "
        f"the class folders {', '.join(PACS_CLASSES)} with that class's images (*.jpg, *.png); "
        "the `kfold` folder of the authors' download has this layout, rename it to "
        f"{base}"
    )
    origin = (
        "PACS (Li et al., 2017, 'Deeper, Broader and Artier Domain Generalization') is "
        f"distributed by its authors through the Google Drive folder linked from {PACS_URL}"
    )
    folders = [base / d / c for d in PACS_DOMAINS for c in PACS_CLASSES]
    _require_dirs("pacs", root, folders, layout, origin)
    size = options["size"]
    rows: dict[str, list[tuple[str, str, np.ndarray, int]]] = {"train": [], "test": []}
    for d, domain in enumerate(PACS_DOMAINS):
        for c, cls in enumerate(PACS_CLASSES):
            folder = base / domain / cls
            files = sorted(f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                raise DatasetNotAvailable(
                    f"dataset 'pacs': {folder} holds no images ({', '.join(IMAGE_SUFFIXES)}); "
                    f"expected layout: {layout}"
                )
            held_out = np.zeros(len(files), dtype=bool)
            rng = np.random.default_rng([PACS_SPLIT_SEED, d, c])
            held_out[rng.permutation(len(files))[: int(round(fraction * len(files)))]] = True
            for file, test in zip(files, held_out):
                image = decode_image(file.read_bytes(), size)
                rows["test" if test else "train"].append((f"{d}/{c}/{file.name}", cls, image, d))
    out = {}
    for split, items in rows.items():
        items.sort(key=lambda r: r[0])
        x, y = stack_split([r[:3] for r in items], list(PACS_CLASSES), size, str(base))
        domain = torch.tensor([r[3] for r in items], dtype=torch.long)
        out[split] = (torch.from_numpy(x), torch.from_numpy(y), domain)
    return Arrays(
        out["train"][0],
        out["train"][1],
        out["test"][0],
        out["test"][1],
        class_names=PACS_CLASSES,
        mean=IMAGENET_STATS[0],
        std=IMAGENET_STATS[1],
        domain_train=out["train"][2],
        domain_test=out["test"][2],
        domain_names=PACS_DOMAINS,
    )


def _pacs_sizes(options: dict[str, Any]) -> tuple[int, int]:
    """(train, test) images of `_build_pacs`' split, from the domains' image counts: the split
    rounds per (domain, class) folder, whose counts are not declared here, so the real test
    count may differ from this by up to 4 images per domain (16 of 9,991)."""
    test = sum(int(round(options["test_fraction"] * n)) for n in PACS_DOMAIN_IMAGES)
    return sum(PACS_DOMAIN_IMAGES) - test, test


def cifar10_train(root: Path, download: bool) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """CIFAR-10's training split (images, labels, class names), read through torchvision."""
    missing = missing_files("cifar10", root)
    if missing and not download:
        raise DatasetNotAvailable(not_available_message("cifar10", root, missing))
    return torchvision_split("cifar10", root, True, download)


def _build_cifar10c(root: Path, options: dict[str, Any]) -> Arrays:
    import torch

    base = Path(root) / "raw" / "cifar10c" / "CIFAR-10-C"
    corruption, severity = options["corruption"], options["severity"]
    files = [base / f"{corruption}.npy", base / "labels.npy"]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise DatasetNotAvailable(
            f"dataset 'cifar10c' is not on disk (missing {missing[0]}). "
            f"Download CIFAR-10-C.tar from {CIFAR10C_URL} and extract it into {base.parent} "
            f"(giving {base}/<corruption>.npy and labels.npy), then run "
            f"`fedhet prepare-data --dataset cifar10c --root {root}`."
        )
    rows = slice((severity - 1) * CIFAR10C_PER_SEVERITY, severity * CIFAR10C_PER_SEVERITY)
    x_test = np.array(
        np.load(files[0], mmap_mode="r")[rows].transpose(0, 3, 1, 2), dtype=np.uint8, order="C"
    )
    y_test = np.array(np.load(files[1], mmap_mode="r")[rows], dtype=np.int64)
    x_train, y_train, classes = cifar10_train(root, options["download"])
    return Arrays(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
        class_names=classes,
        mean=CIFAR10_STATS[0],
        std=CIFAR10_STATS[1],
    )


DATASETS.add(
    "synthdigits",
    DatasetSpec(
        name="synthdigits",
        build=_digit_folder_builder("synthdigits"),
        num_classes=10,
        channels=3,
        size=32,
        source="manual",
        description="SynthDigits: synthetic house-number-like digits (DIGITS domain)",
        options={"channels": 3, "size": 32},
        choices={"channels": (1, 3)},
        sizes=fixed_sizes(10_000, 2_000),  # the authors' copy (FedLGD, FedBN)
    ),
)
DATASETS.add(
    "mnistm",
    DatasetSpec(
        name="mnistm",
        build=_digit_folder_builder("mnistm"),
        num_classes=10,
        channels=3,
        size=28,
        source="manual",
        description="MNIST-M: MNIST digits blended over colour photo patches (DIGITS domain)",
        options={"channels": 3, "size": 28},
        choices={"channels": (1, 3)},
        sizes=fixed_sizes(10_331, 209),  # the authors' copy (FedLGD, FedBN)
    ),
)
DATASETS.add(
    "retina",
    DatasetSpec(
        name="retina",
        build=_build_retina,
        num_classes=2,
        channels=3,
        size=96,
        source="manual",
        description="Retinal fundus photos from several sites (binary), one domain per site",
        options={"channels": 3, "size": 96},
        choices={"channels": (1, 3)},
        # FedLGD Table 14: Drishti 82/19, ACRIMA 605/100, RIM 385/100, REFUGE 1000/200
        sizes=fixed_sizes(2_072, 419),
    ),
)
DATASETS.add(
    "cifar10c",
    DatasetSpec(
        name="cifar10c",
        build=_build_cifar10c,
        num_classes=10,
        channels=3,
        size=32,
        source="manual",
        description="CIFAR-10 training set; test set = CIFAR-10-C at one corruption and severity",
        options={
            "channels": 3,
            "size": 32,
            "download": False,
            "corruption": "gaussian_noise",
            "severity": 5,
        },
        choices={"channels": (1, 3), "corruption": CORRUPTIONS, "severity": (1, 2, 3, 4, 5)},
        sizes=fixed_sizes(50_000, CIFAR10C_PER_SEVERITY),  # CIFAR-10's train set
    ),
)
DATASETS.add(
    "pacs",
    DatasetSpec(
        name="pacs",
        build=_build_pacs,
        num_classes=7,
        channels=3,
        size=32,
        source="manual",
        description="PACS: 7 classes in 4 styles (art painting, cartoon, photo, sketch), "
        "one domain per style",
        # size 32: FedBR's code resizes PACS to 32×32 (DomainBed uses 224). test_fraction
        # 0.2 is assumed (FedBR states no PACS test split; DomainBed holds out 20 %).
        options={"channels": 3, "size": 32, "test_fraction": 0.2},
        choices={"channels": (1, 3)},
        sizes=_pacs_sizes,
    ),
)
