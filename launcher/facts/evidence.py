"""The shape of a stack fact: `Evidence` (one place in one release where it was read) and
`Fact` (what holds, for which versions), plus the citation helpers the fact tables use.
See `topl.launcher.facts.table` for how the checker re-reads evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# GitHub sources, pinned: a branch or short name as the user declares it -> the commit read.
# MindSpeed's releases are branches (`core_r<Megatron core line>`): every core_r branch and master
# at the snapshot read (master's last commit 2026-07-21), so the checker finds the branches on
# both sides of a fact's range without GitHub (`topl.launcher.facts.bounds`).
COMMITS = {
    "Ascend/MindSpeed": {
        "core_r0.6.0": "199daaa776cd90fac55ca1b0e27cf27d48333229",
        "core_r0.7.0": "ffc055fceecf7e23e79a1a68aa173f42b45185ee",
        "core_r0.8.0": "46f6ca8c3d04d9abd591f80346db8a8ebdb2eccd",
        "core_r0.9.0": "2c920f7e8eb5af004e2c006cd22979b2072cf8ce",
        "core_r0.10.0": "341447fa2143949feb0ef6e4a276a7ad70cbe080",
        "core_r0.14.0": "71b9e055b2183f5e0247c2e9d869f7c4890bdb45",
        "core_r0.15.3": "d0d5809d4323eb908f89e87958de254465eb57b4",
        "core_r0.16.0": "e4772499f7eb9fa9a68919dd1eaddef00e915b2d",
        "core_r0.17.0": "1f5feb86da9e6ccc6f8e981f5f0ac655a2d00ae5",
        "core_r0.18.0": "4213c91313fe4de6da12794109515f6275572750",
        "master": "028de58ca629d035185b00ff7d1eb7eff4f7fd48",
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
    # what the checker reads at the edges of `when` (the releases just inside and just outside,
    # from the registry's release list): (path, needle) pairs, present inside and absent outside.
    # Empty: the present evidence of the fact's own package (see `topl.launcher.facts.bounds`)
    probe: tuple[tuple[str, str], ...] = ()
    range_note: str = ""  # why the range cannot be checked at its edges, where it cannot
    # how an installed package shows it, for `topl doctor`: (module, file in it, needle); the
    # same needle is cited in `evidence` for a real release
    detect: tuple[str, ...] = ()  # empty, or (module, file, needle)
    value: Any = True
    otherwise: Any = False


def va(v: str, path: str, needle: str, present: bool = True) -> Evidence:
    return Evidence("vllm-ascend", v, f"vllm_ascend/{path}", needle, present)


def verl(v: str, path: str, needle: str, present: bool = True) -> Evidence:
    return Evidence("verl", v, f"verl/{path}", needle, present)


def seed(path: str, needle: str, present: bool = True) -> Evidence:
    return Evidence(f"github:{SEED}", SEED_AT, f"{TOP}/{path}", needle, present)
