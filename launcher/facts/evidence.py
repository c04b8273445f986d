"""The shape of a stack fact: `Evidence` (one place in one release where it was read) and
`Fact` (what holds, for which versions), plus the citation helpers the fact tables use.
See `topl.launcher.facts.table` for how the checker re-reads evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# GitHub sources, pinned: a branch or short name as the user declares it -> the commit read.
COMMITS = {
    "Ascend/MindSpeed": {
        "core_r0.16.0": "e4772499f7eb9fa9a68919dd1eaddef00e915b2d",
        "master": "028de58c",
    },
    "psyloy/verl-ascend-recipe": {"6823af18": "6823af180b31b3b83dee4098281169ad2bac8693"},
}
SEED = "psyloy/verl-ascend-recipe"
SEED_AT = "6823af18"
TOP = "true_on_policy"


@dataclass(frozen=True)
class Evidence:
    package: str  # PyPI name (vllm-ascend, verl, torch-npu, vllm) or github:owner/name
    version: str  # release, or the branch / short commit for github sources (see COMMITS)
    path: str  # file inside the package (sdist paths without the top folder)
    needle: str  # substring, or `re:` + a regex (DOTALL) for an order of statements
    present: bool = True  # False: the file lacks the needle (or does not exist)

    @property
    def cite(self) -> str:
        pkg = self.package.removeprefix("github:")
        sym = self.needle.removeprefix("re:")
        return f"{pkg}@{self.version}:{self.path}:{sym}" + ("" if self.present else " (absent)")


@dataclass(frozen=True)
class Fact:
    id: str
    package: (
        str  # cluster.versions key that decides: vllm_ascend, verl, torch_npu, mindspeed, cann ...
    )
    text: str  # what holds, one line, for people
    when: str | None  # PEP 440 specifier where it holds; "" always; None in no release
    evidence: tuple[Evidence, ...] = ()
    patch: str = ""  # "<versions list>:<name>" that makes it hold on any version
    source: str = ""  # a source that is not a package file (docs, announcement)
    unchecked: str = ""  # why the checker cannot re-read it, when it cannot
    # how an installed package shows it, for `topl doctor`: (module, file in it, needle); the
    # same needle is cited in `evidence` for a real release
    detect: tuple[str, str, str] = ()
    value: Any = True
    otherwise: Any = False


def va(v, path, needle, present=True):
    return Evidence("vllm-ascend", v, f"vllm_ascend/{path}", needle, present)


def verl(v, path, needle, present=True):
    return Evidence("verl", v, f"verl/{path}", needle, present)


def seed(path, needle, present=True):
    return Evidence(f"github:{SEED}", SEED_AT, f"{TOP}/{path}", needle, present)
