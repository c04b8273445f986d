"""One version parser for every package the launcher reads (contract rules, facts, the doctor).

Each declared or installed version becomes a PEP 440 `Version`, ordered as its vendor orders it:

- PyPI packages (verl, vllm, vllm_ascend, torch, torch_npu, ...): PEP 440 itself, in the
  normalized spelling the registry lists (`0.30.0rc2 < 0.30.0`, `2.8.0.post4 > 2.8.0`, `2.9.0+cpu`
  keeps its local label); a loose spelling PEP 440 would reinterpret (`2.9.0.B120`, a torch_npu
  PTA build, as beta 120) is refused.
- CANN: `8.5.RC1` -> 8.5rc1; `9.0.0-beta.1` / `9.0.0.beta1` / `9.0.0.beta.1` -> 9.0.0b1 (the
  vendor's tags: cann/asc-devkit CHANGELOG.md, v9.0.0-beta.1 2026/02/25 before v9.0.0-beta.2
  2026/03/31, both before 9.0.0); `-alpha.N` -> aN. A `.Bnnn` build (`9.0.0.B160`, the seed's
  CANN900B160; `8.0.RC2.B010`) -> `9.0.0.dev160` / `8.0rc2.dev10`: a development build of that
  release, ordered BEFORE its alphas, betas and RCs. No public CANN document maps build numbers
  to betas (searched: the CANN release notes and asc-devkit changelog name none), so this is the
  conservative order: a fact that starts at a beta does not hold on a B-build of that release.
- MindSpeed: branches `core_r0.16.0` and `2.3.0_core_r0.12.1` -> the Megatron core line (0.16.0,
  0.12.1); `master` / `main` -> 9999 (newer than every release branch).

Anything else is refused with a message (`VersionError`), never truncated to its leading numbers.
Parsing is cached: `topl plan` reads the same few strings for every point of a sweep.
"""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.version import InvalidVersion, Version

UNKNOWN = Version("0")  # what a rule compares when a declared version does not parse
NEWEST = Version("9999")  # a development branch (MindSpeed master): newer than every release

_CANN = re.compile(
    r"(?P<rel>\d+(?:\.\d+){0,3})"
    # lower-case a/b only: `.B160` is a build, `b1` a beta
    r"(?:[.-]?(?P<pre>[Rr][Cc]|alpha|beta|a|b)[.-]?(?P<n>\d+))?"
    r"(?:\.B(?P<build>\d+))?"
)
_BUILD = re.compile(r"\.B\d+$")
_PRE = {"rc": "rc", "alpha": "a", "a": "a", "beta": "b", "b": "b"}
_MINDSPEED = re.compile(r"(?:v?\d+(?:\.\d+)*_)?core_r(?P<core>\d+(?:\.\d+)*)")

FORMS = {
    "cann": "9.0.0, 9.0, 8.5.RC1, 9.0.0-beta.2, 9.0.0.beta2, 9.0.0.B160, 8.0.RC2.B010",
    "mindspeed": "core_r0.16.0, 2.3.0_core_r0.12.1, master",
}


class VersionError(ValueError):
    """A version in a form its vendor does not use (the message says which forms are read)."""


def _key(package: str) -> str:
    return package.strip().lower().replace("-", "_")


def _refuse(package: str, text: str, why: str = "") -> VersionError:
    forms = FORMS.get(_key(package), "a PEP 440 release: 0.23.0.post1, 0.30.0rc2, 2.9.0+cpu")
    what = f"{package} version {text!r}" if package else f"version {text!r}"
    return VersionError(f"{what} is not a version topl can order{why}; forms read: {forms}")


@lru_cache(maxsize=4096)
def _read(package: str, text: str) -> Version:
    key = _key(package)
    if key == "cann":
        m = _CANN.fullmatch(text)
        if not m:
            raise _refuse(package, text)
        pre, build = m["pre"], m["build"]
        if build is not None and pre and _PRE[pre.lower()] != "rc":
            raise _refuse(package, text, " (a build number on an alpha/beta has no known order)")
        out = m["rel"] + (f"{_PRE[pre.lower()]}{int(m['n'])}" if pre else "")
        return Version(out + (f".dev{int(build)}" if build is not None else ""))
    if key == "mindspeed":
        if text in ("master", "main"):
            return NEWEST
        m = _MINDSPEED.fullmatch(text)
        text = m["core"] if m else text
    try:
        v = Version(text)
    except InvalidVersion:
        raise _refuse(package, text) from None
    # PEP 440 also reads loose spellings (`2.9.0.B120` as beta 120, `1.0-1` as a post release):
    # a registry lists its releases normalized, so anything else is a vendor build name
    if v.public != text.split("+")[0].lower().removeprefix("v"):  # a local label is free-form
        hint = " (a build number: declare the release it belongs to)" if _BUILD.search(text) else ""
        raise _refuse(package, text, hint)
    return v


def read(package: str, text) -> Version:
    """The version `text` of `package` (a cluster.versions key or PyPI name); VersionError if
    it is empty or in a form that package's vendor does not use."""
    s = str(text if text is not None else "").strip()
    if not s:
        raise VersionError(f"{package or 'a package'} has no version declared")
    return _read(package, s)


def problem(package: str, text) -> str | None:
    """Why `text` cannot be read as a `package` version; None when it can."""
    try:
        read(package, text)
    except VersionError as e:
        return str(e)
    return None


def parse(text, package: str = "") -> Version | None:
    """Like `read`, but None where the version is empty or unreadable (`problem` says why)."""
    try:
        return read(package, text)
    except VersionError:
        return None
