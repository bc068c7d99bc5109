"""Downloading one file so that nothing is lost: resumable, size-checked, integrity-checked.

Bytes go to ``<dest>.part``; an interrupted transfer (a dropped connection, a killed process) is
resumed with an HTTP ``Range`` request from the bytes already there. The file is renamed onto
``dest`` only once it has the length the server announced and, for a ``.zip`` or ``.gz``, every
member's CRC checks out. ``COMMGRAPH_MIRROR`` (e.g. ``http://mirror.lan:8080``) replaces the scheme
and host of every URL and keeps its path.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import socket
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from commgraph.errors import DatasetError

MIRROR_ENV = "COMMGRAPH_MIRROR"
BLOCK = 1 << 20
ATTEMPTS = 4
TIMEOUT = 60.0
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


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


def download(url: str, dest: Path, *, progress: bool = True) -> None:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``), check its length and archive CRCs,
    then rename it into place. Server errors (5xx) and broken transfers are retried."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for attempt in range(ATTEMPTS):
        try:
            if _transfer(url, part, progress):
                break
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == ATTEMPTS - 1:
                raise DatasetError(f"{url} answered HTTP {exc.code} {exc.reason} (fetching {dest.name})") from None
        except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
            if attempt == ATTEMPTS - 1:
                reason = getattr(exc, "reason", exc)
                raise DatasetError(
                    f"cannot download {dest.name} ({reason}): fetch {url} yourself and put it at {dest}, "
                    f"then run again (or set {MIRROR_ENV})") from None
        time.sleep(min(0.2 * 2 ** attempt, 2.0))
    else:
        have = part.stat().st_size if part.exists() else 0
        raise DatasetError(f"{url} kept breaking off ({have:,} bytes of {dest.name} kept in {part}); "
                           "run again to resume")
    try:
        check_archive(part, dest.name)
    except DatasetError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)


def _transfer(url: str, part: Path, progress: bool) -> bool:
    """One request; True when ``part`` then holds the whole file."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "commgraph"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT)
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

        with open(part, "ab" if have else "wb") as out, tqdm(
            total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=part.name[:-5],
            disable=not progress, leave=False,
        ) as bar:
            try:
                while block := response.read(BLOCK):
                    out.write(block)
                    bar.update(len(block))
            except (http.client.IncompleteRead, ConnectionError, socket.timeout):
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
