"""Read cited files from the real packages, into a cache, without installing anything.

- PyPI sdists (vllm-ascend): downloaded once, only the cited members are kept.
- PyPI wheels (verl, vllm, torch-npu): read with HTTP range requests (the zip's central
  directory and the cited members only: a few hundred kB of a multi-GB vllm wheel).
- GitHub (MindSpeed, the seed): a local mirror of git directories
  (`TOPL_FACTS_GIT_MIRROR=/dir` holding `owner+name/repo`), or GitHub's raw file host at the
  pinned commit when `TOPL_FACTS_GITHUB=1` (off by default: CI reaches package registries only).

The package index is the one pip is configured with (`PIP_INDEX_URL`, else pip's own default),
so this module names no host of its own; `TOPL_FACTS_INDEX` overrides it.

Used by `scripts/check_facts.py` and the `facts_sources` tests; never by the launcher itself.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from topl.launcher.facts.evidence import COMMITS, SDIST_SHA256, Evidence

RAW = "https://raw.githubusercontent.com"


def _index() -> str:
    """The simple index pip uses here (the same registry `pip download` would ask)."""
    url = os.environ.get("TOPL_FACTS_INDEX") or os.environ.get("PIP_INDEX_URL")
    if not url:
        from pip._internal.models.index import PyPI  # pip's built-in default index

        url = PyPI.simple_url
    return url.rstrip("/")


class Unreachable(Exception):
    """The source could not be fetched (no network, index down): the check is skipped, not failed."""


def cache_dir() -> Path:
    root = os.environ.get("TOPL_FACTS_CACHE") or Path.home() / ".cache" / "topl-facts"
    return Path(root)


def _get(url: str, headers: dict[str, str] | None = None, timeout: float = 60) -> bytes:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=timeout
        ) as r:
            body: bytes = r.read()
            return body
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return b""
        raise Unreachable(f"{url}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"{url}: {e}") from e


@functools.lru_cache(maxsize=None)
def _simple(package: str) -> dict[str, Any]:
    """The package's page of the JSON simple index (PEP 691 / 700), read once per run."""
    index = _index()
    body = _get(f"{index}/{package}/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    if not body:
        raise Unreachable(f"{package} not on {index}")
    page: dict[str, Any] = json.loads(body)
    return page


def releases(package: str) -> list[str]:
    """Every release of `package` the index lists with a file that is not yanked (pre-releases
    included, as `pip index versions --pre` lists them)."""
    page = _simple(package)
    norm = re.sub(r"[-_.]+", "_", package).lower()
    live = set()
    for f in page["files"]:
        if f.get("yanked"):
            continue
        name = f["filename"]
        stem = name[: -len(".tar.gz")] if name.endswith(".tar.gz") else name
        parts = stem.split("-")
        if len(parts) >= 2 and re.sub(r"[-_.]+", "_", parts[0]).lower() == norm:
            live.add(_canon(parts[1]))
    listed = page.get("versions") or sorted(live)
    return [v for v in listed if _canon(v) in live]


def _canon(v: str) -> str:
    try:
        return str(Version(v))
    except InvalidVersion:
        return v


def _files(package: str, version: str) -> list[dict[str, Any]]:
    """The release's files from PyPI's JSON simple index (PEP 691)."""
    norm = re.sub(r"[-_.]+", "_", package).lower()
    out = []
    for f in _simple(package)["files"]:
        name = f["filename"].lower()
        if (
            name.startswith(f"{norm}-{version.lower()}-")
            or name == f"{norm}-{version.lower()}.tar.gz"
        ):
            out.append(f)
    return out


def _pick_wheel(files: list[dict[str, Any]]) -> dict[str, Any] | None:
    wheels = [f for f in files if f["filename"].endswith(".whl")]
    for pref in ("py3-none-any", "x86_64"):
        for f in wheels:
            if pref in f["filename"]:
                return f
    return wheels[0] if wheels else None


class _RangeFile(io.RawIOBase):
    """A seekable read-only file over HTTP range requests (enough for zipfile)."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.pos = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = {0: off, 1: self.pos + off, 2: self.size + off}[whence]
        return self.pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        data = _get(self.url, {"Range": f"bytes={self.pos}-{self.pos + n - 1}"})[:n]
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _read_wheel(package: str, version: str, paths: set[str]) -> dict[str, str | None]:
    f = _pick_wheel(_files(package, version))
    if f is None:
        raise Unreachable(f"no wheel for {package}=={version}")
    raw = _RangeFile(f["url"], int(f["size"]))
    out: dict[str, str | None] = {p: None for p in paths}
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 16)) as z:
        names = z.namelist()
        for p in paths:
            hit = (
                [n for n in names if n.endswith(".dist-info/METADATA")]
                if p == "METADATA"
                else [n for n in names if n == p]
            )
            if hit:
                out[p] = z.read(hit[0]).decode("utf-8", "replace")
    return out


def _read_sdist(package: str, version: str, paths: set[str]) -> dict[str, str | None]:
    f = next((f for f in _files(package, version) if f["filename"].endswith(".tar.gz")), None)
    if f is None:
        raise Unreachable(f"no sdist for {package}=={version}")
    data = _get(f["url"], timeout=300)
    want = SDIST_SHA256.get(package, {}).get(version) or f.get("hashes", {}).get("sha256")
    got = hashlib.sha256(data).hexdigest()
    if want and got != want:  # not "unreachable": a different file under a release's name
        raise ValueError(f"{f['filename']}: sha256 {got}, pinned / indexed {want}")
    out: dict[str, str | None] = {p: None for p in paths}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        for m in t:
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if rel in paths and m.isfile() and (fh := t.extractfile(m)) is not None:
                out[rel] = fh.read().decode("utf-8", "replace")
    return out


def _read_github(repo: str, ref: str, paths: set[str]) -> dict[str, str | None]:
    commit = COMMITS.get(repo, {}).get(ref, ref)
    mirror = os.environ.get("TOPL_FACTS_GIT_MIRROR")
    out: dict[str, str | None] = {}
    for p in paths:
        if mirror:
            git = Path(mirror) / repo.replace("/", "+") / "repo"
            if not git.is_dir():
                raise Unreachable(f"github:{repo}: no mirror at {git}")
            r = subprocess.run(
                ["git", "--git-dir", str(git), "show", f"{commit}:{p}"],
                capture_output=True,
                check=False,
            )  # bytes: the text exactly as committed (no newline translation)
            out[p] = r.stdout.decode("utf-8", "replace") if r.returncode == 0 else None
        elif os.environ.get("TOPL_FACTS_GITHUB") == "1":
            body = _get(f"{RAW}/{repo}/{commit}/{p}")
            out[p] = body.decode("utf-8", "replace") if body else None
        else:
            raise Unreachable(f"github:{repo}: set TOPL_FACTS_GIT_MIRROR or TOPL_FACTS_GITHUB=1")
    return out


def _fetch(pkg: str, ver: str, paths: set[str]) -> dict[str, str | None]:
    if pkg.startswith("github:"):
        return _read_github(pkg.removeprefix("github:"), ver, paths)
    return (_read_sdist if pkg == "vllm-ascend" else _read_wheel)(pkg, ver, paths)


MISSING = "\0missing"  # cached marker: the file is not in that release


def read_all(
    evidence: list[Evidence],
) -> tuple[dict[tuple[str, str, str], str | None], dict[tuple[str, str], str]]:
    """({(package, version, path): text or None (no such file)}, {(package, version): why
    unreachable}) for every cited file; what was read is cached."""
    want: dict[tuple[str, str], set[str]] = {}
    for e in evidence:
        want.setdefault((e.package, e.version), set()).add(e.path)
    out: dict[tuple[str, str, str], str | None] = {}
    skipped: dict[tuple[str, str], str] = {}
    for (pkg, ver), paths in want.items():
        # a GitHub ref is cached under its pinned commit: a moved branch is a new entry
        ref = COMMITS.get(pkg.removeprefix("github:"), {}).get(ver, ver)
        base = cache_dir() / pkg.replace("/", "+").replace(":", "_") / ref
        todo = {p for p in paths if not (base / p).is_file()}
        try:
            got = _fetch(pkg, ver, todo) if todo else {}
        except Unreachable as e:
            skipped[(pkg, ver)] = str(e)
            continue
        if got:
            for p, text in got.items():
                (base / p).parent.mkdir(parents=True, exist_ok=True)
                with open(base / p, "w", encoding="utf-8", newline="") as fh:
                    fh.write(MISSING if text is None else text)
        for p in paths:
            with open(base / p, encoding="utf-8", newline="") as fh:  # as read: no newline rewrite
                text = fh.read()
            out[(pkg, ver, p)] = None if text == MISSING else text
    return out, skipped


def found(e: Evidence, text: str | None) -> bool:
    """Whether the needle is in the file (a missing file has nothing)."""
    if text is None:
        return False
    if e.needle.startswith("re:"):
        return re.search(e.needle[3:], text, re.DOTALL) is not None
    return e.needle in text


def definition(text: str, attr: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The `def` of `attr` ("Class.method" or "function") at the top of a module's source (the
    last one, as Python keeps it), or None when the module does not define it."""
    *path, name = attr.split(".")
    body: list[ast.stmt] = ast.parse(text).body
    for part in path:
        cls = next(
            (n for n in reversed(body) if isinstance(n, ast.ClassDef) and n.name == part), None
        )
        if cls is None:
            return None
        body = cls.body
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    return next((n for n in reversed(body) if isinstance(n, funcs) and n.name == name), None)


def params(text: str, attr: str) -> tuple[str, ...] | None:
    """The parameter names of `attr` as `inspect.signature` lists them, less *args / **kwargs
    (posonly + args + kwonly): what `topl.launcher.align.patches.resolve` compares at run time;
    None when the module does not define it."""
    fn = definition(text, attr)
    if fn is None:
        return None
    a = fn.args
    return tuple(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)
