"""Downloading one file so that nothing is lost: resumable, size-checked, integrity-checked.

Bytes go to ``<dest>.part``; an interrupted transfer (a dropped connection, a killed process) is
resumed with an HTTP ``Range`` request from the bytes already there. The file is renamed onto
``dest`` only once it has the length the server announced and, for a ``.zip`` or ``.gz``, every
member's CRC checks out. ``COMMGRAPH_MIRROR`` (e.g. ``http://mirror.lan:8080``) replaces the scheme
and host of every URL and keeps its path.

How long a silent server is waited for is :class:`Patience`: each read waits at most
:data:`TIMEOUT` seconds (``COMMGRAPH_DOWNLOAD_TIMEOUT``, ``graph datasets download --read-timeout``)
and a file gets :data:`ATTEMPTS` tries (``COMMGRAPH_DOWNLOAD_TRIES``, ``--tries``), each resuming
from the bytes already kept; every abandoned try is said on stderr with what comes next. A host
that does not resolve is not tried again: no network answers a second time either.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import math
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from commgraph.errors import DatasetError, Unreachable

MIRROR_ENV = "COMMGRAPH_MIRROR"
BLOCK = 1 << 20
ATTEMPTS = 4
TIMEOUT = 60.0
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
TIMEOUT_ENV, TRIES_ENV = "COMMGRAPH_DOWNLOAD_TIMEOUT", "COMMGRAPH_DOWNLOAD_TRIES"


@dataclass(frozen=True)
class Patience:
    """How long a download waits: ``read_seconds`` for any one read (connecting included) before
    the try is abandoned, and ``tries`` per file."""

    read_seconds: float = TIMEOUT
    tries: int = ATTEMPTS

    def __post_init__(self) -> None:
        if not 0 < self.read_seconds < math.inf:
            raise DatasetError(f"the read timeout must be a finite number of seconds > 0, got {self.read_seconds}")
        if self.tries < 1:
            raise DatasetError(f"a download needs at least 1 try, got {self.tries}")

    @classmethod
    def from_env(cls) -> Patience:
        """The defaults, or ``$COMMGRAPH_DOWNLOAD_TIMEOUT`` and ``$COMMGRAPH_DOWNLOAD_TRIES``."""
        try:
            return cls(float(os.environ.get(TIMEOUT_ENV, TIMEOUT)), int(os.environ.get(TRIES_ENV, ATTEMPTS)))
        except ValueError:
            raise DatasetError(
                f"{TIMEOUT_ENV} must be seconds and {TRIES_ENV} a count, got "
                f"{os.environ.get(TIMEOUT_ENV)!r} and {os.environ.get(TRIES_ENV)!r}"
            ) from None


def mirrored(url: str) -> str:
    """``url`` with its scheme and host replaced by ``$COMMGRAPH_MIRROR``'s (whose own path, if
    any, goes in front of the original path)."""
    mirror = os.environ.get(MIRROR_ENV, "").strip()
    if not mirror:
        return url
    base = urlsplit(mirror)
    if not base.scheme or not base.netloc:
        raise DatasetError(f"{MIRROR_ENV}={mirror!r} is not a URL like http://host:port")
    original = urlsplit(url)
    return urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + original.path, original.query, ""))


def download(url: str, dest: Path, *, progress: bool = True, patience: Patience | None = None) -> None:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``), check its length and archive CRCs,
    then rename it into place. Server errors (5xx), silences longer than a read may wait and broken
    transfers are retried, ``patience`` (default :meth:`Patience.from_env`) saying how long and how
    often; :class:`~commgraph.errors.Unreachable` when the host does not resolve or no try
    reached it."""
    patience = patience or Patience.from_env()
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    host = urlsplit(url).netloc
    for attempt in range(1, patience.tries + 1):
        why = None
        try:
            if _transfer(url, part, progress, patience.read_seconds):
                break
            why = "the transfer broke off"
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == patience.tries:
                raise DatasetError(f"{url} answered HTTP {exc.code} {exc.reason} (fetching {dest.name})") from None
            why = f"HTTP {exc.code}"
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, socket.gaierror):  # no name service: another try cannot help
                raise Unreachable(f"{host} does not resolve: no network, or no DNS") from None
            if attempt == patience.tries:
                raise Unreachable(f"{reason}; {_kept(part)}, {_spent(patience)}") from None
            why = (
                f"{reason}"
                if not isinstance(exc, socket.timeout)
                else f"{host} sent nothing for {patience.read_seconds:g} s"
            )
        if progress and attempt < patience.tries:
            print(
                f"commgraph: {dest.name}: {why}; {_kept(part)}; try {attempt + 1} of {patience.tries} "
                f"(at most {patience.read_seconds:g} s per read)",
                file=sys.stderr,
            )
        time.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))
    else:
        raise DatasetError(
            f"{url} kept breaking off ({_kept(part)} in {part}, {_spent(patience)}); run again to resume"
        )
    try:
        check_archive(part, dest.name)
    except DatasetError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)


def _kept(part: Path) -> str:
    return f"{part.stat().st_size if part.exists() else 0:,} bytes kept"


def _spent(patience: Patience) -> str:
    return (
        f"{patience.tries} tries of at most {patience.read_seconds:g} s per read; `graph datasets download "
        f"--tries N --read-timeout S`, or {TRIES_ENV} and {TIMEOUT_ENV}, change them"
    )


def _transfer(url: str, part: Path, progress: bool, timeout: float) -> bool:
    """One request, each read waiting at most ``timeout`` seconds; True when ``part`` then holds
    the whole file. What arrived is kept as it arrives, so a try that breaks off loses nothing."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "commgraph"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # our partial file is not a prefix the server knows: start over
            part.unlink()
            return False
        raise
    with response:
        total = _expected_total(response, have)
        if response.status != 206:
            have = 0
        from tqdm import tqdm

        with (
            open(part, "ab" if have else "wb") as out,
            tqdm(
                total=total,
                initial=have,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=part.name[:-5],
                disable=None if progress else True,
                leave=False,
            ) as bar,
        ):
            try:
                while block := response.read1(BLOCK):  # what has come, not a whole block: kept if the next read fails
                    out.write(block)
                    bar.update(len(block))
            except (TimeoutError, http.client.IncompleteRead, ConnectionError):
                return False
    size = part.stat().st_size
    if total is not None and size > total:
        part.unlink()
        return False
    return total is None or size == total


def _expected_total(response, have: int) -> int | None:
    """The full file's length, from Content-Range (a resumed transfer) or Content-Length."""
    if response.status == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if not match or int(match.group(1)) != have:
            raise urllib.error.URLError(f"unusable Content-Range {response.headers.get('Content-Range')!r}")
        return None if match.group(3) == "*" else int(match.group(3))
    length = response.headers.get("Content-Length")
    return int(length) if length is not None else None


def check_archive(path: Path, name: str) -> None:
    """Every CRC of a zip's members, or a gzip stream's CRC and length, must check out."""
    try:
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            if bad is not None:
                raise DatasetError(f"{name}: member {bad} fails its CRC check")
        elif name.endswith(".gz"):
            with gzip.open(path, "rb") as stream:
                while stream.read(1 << 24):
                    pass
    except (zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        raise DatasetError(f"{name} is damaged ({exc}); it was deleted: run again to fetch it anew") from None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 23):
            digest.update(block)
    return digest.hexdigest()
