"""Verified downloads of the dataset archives that torchvision does not provide.

`DOWNLOADS` lists each archive's public URL, file name and checksums. A download goes to
`<file>.part`, is checked (byte count announced by the server, size, sha256, md5), and only
then renamed to its final name; on any failure the partial file is removed. Setting
`FEDHET_DOWNLOAD_BASE_URL` (or passing `base_url`) fetches `<base_url>/<filename>`
instead, e.g. from a mirror or a local test server.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from fedhet.data.core import DatasetNotAvailable

BASE_URL_ENV = "FEDHET_DOWNLOAD_BASE_URL"
CHUNK = 1 << 20
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Download:
    """One archive: where it is, what it is called, and what it must hash to.

    Unknown checksums are `None`; at least one of `sha256`, `md5`, `size` should be set.
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None
    size: int | None = None
    # the dataset whose `fedhet prepare-data --download` fetches it; None: the entry's name
    dataset: str | None = None


# The publishers give no sha256 for these archives, so sha256 is None and they are
# verified by size and md5: the md5s and sizes recorded by many public loaders of the
# same URLs.
DOWNLOADS: dict[str, Download] = {
    "cinic10": Download(
        url="https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",
        filename="CINIC-10.tar.gz",
        md5="6ee4d0c996905fe93221de577967a372",
        size=687_544_992,
    ),
    "tinyimagenet": Download(
        url="http://cs231n.stanford.edu/tiny-imagenet-200.zip",
        filename="tiny-imagenet-200.zip",
        md5="90528d7ca1a48142e341f4ef8d21d0de",
        size=248_100_043,
    ),
    # CIFAR-10-C (Hendrycks & Dietterich 2019), Zenodo record 2535967.
    "cifar10c_clients": Download(
        url="https://zenodo.org/records/2535967/files/CIFAR-10-C.tar?download=1",
        filename="CIFAR-10-C.tar",
        md5="56bf5dcef84df0e2308c6dcbcbbd8499",
        size=2_918_471_680,
    ),
    # The public copy of MNIST-M (59,001 / 9,001 images; github.com/liyxi/mnist-m), one
    # `(images uint8 [N, 28, 28, 3], labels)` tuple saved by torch per split; md5 only.
    "mnistm_train": Download(
        url="https://github.com/liyxi/mnist-m/releases/download/data/mnist_m_train.pt.tar.gz",
        filename="mnist_m_train.pt.tar.gz",
        md5="191ed53db9933bd85cc9700558847391",
        dataset="digits5",
    ),
    "mnistm_test": Download(
        url="https://github.com/liyxi/mnist-m/releases/download/data/mnist_m_test.pt.tar.gz",
        filename="mnist_m_test.pt.tar.gz",
        md5="e11cb4d7fff76d7ec588b1134907db59",
        dataset="digits5",
    ),
}


class DownloadError(DatasetNotAvailable):
    """A download failed or its file does not match the recorded checksums."""


def source_url(entry: Download, base_url: str | None = None) -> str:
    """The URL to fetch: `<base_url>/<filename>` when a base URL is set, else the entry's."""
    base = base_url or os.environ.get(BASE_URL_ENV)
    return f"{base.rstrip('/')}/{entry.filename}" if base else entry.url


def fetch(
    name: str, dest_dir: str | os.PathLike, base_url: str | None = None, timeout: float = 60.0
) -> Path:
    """The verified archive of `name` in `dest_dir`, downloading it if it is not there.

    Raises DownloadError when the download fails or the file does not verify; no partial
    file is left behind. The partial file's name carries the process id, so two jobs
    fetching the same archive do not write into each other's file.
    """
    entry = DOWNLOADS[name]
    dest = Path(dest_dir) / entry.filename
    if dest.is_file():
        check_file(name, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    url = source_url(entry, base_url)
    log.info("downloading %s to %s", url, dest)
    try:
        _verify(entry, _stream(url, part, timeout), "the downloaded file")
        os.replace(part, dest)
    except BaseException as err:
        part.unlink(missing_ok=True)
        if not isinstance(err, Exception):  # interrupted: clean up, nothing to explain
            raise
        reason = str(err).rstrip(".")
        raise DownloadError(
            f"download of {url} failed: {reason}. {manual_hint(name, dest)}"
        ) from err
    return dest


def check_file(name: str, path: Path) -> None:
    """Verify an archive already on disk (downloaded earlier or placed by hand)."""
    entry = DOWNLOADS[name]
    digest = _Digest()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    try:
        _verify(entry, digest, str(path))
    except DownloadError as err:
        raise DownloadError(
            f"{err}. Delete it and run `fedhet prepare-data --dataset {entry.dataset or name} "
            f"--download`, or fetch {entry.url} by hand again."
        ) from None


def manual_hint(name: str, dest: Path) -> str:
    """What to do when the archive cannot be downloaded here."""
    entry = DOWNLOADS[name]
    return (
        f"Check the network (or set {BASE_URL_ENV} to a mirror) and run "
        f"`fedhet prepare-data --dataset {entry.dataset or name} --download` again, or fetch "
        f"{entry.url} by hand and save it as {dest}."
    )


class _Digest:
    """Byte count, sha256 and md5 of data seen block by block."""

    def __init__(self) -> None:
        self.size = 0
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)

    def update(self, block: bytes) -> None:
        self.size += len(block)
        self.sha256.update(block)
        self.md5.update(block)


def _stream(url: str, part: Path, timeout: float) -> _Digest:
    """Download `url` into `part`, checking the byte count the server announced."""
    digest = _Digest()
    with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as fh:
        announced = response.headers.get("Content-Length")
        while block := response.read(CHUNK):
            fh.write(block)
            digest.update(block)
    if announced is not None and digest.size != int(announced):
        raise DownloadError(f"cut short, got {digest.size} of {announced} bytes")
    return digest


def _verify(entry: Download, digest: _Digest, what: str) -> None:
    """Compare what was received with every checksum the entry records."""
    checks = (
        ("size", entry.size, digest.size),
        ("sha256", entry.sha256, digest.sha256.hexdigest()),
        ("md5", entry.md5, digest.md5.hexdigest()),
    )
    for label, expected, actual in checks:
        if expected is not None and expected != actual:
            raise DownloadError(f"{what}: {label} is {actual}, expected {expected}")
