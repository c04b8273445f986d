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
# PyPI sdists, pinned: the sha256 of each archive read (the index's own hash when it was read;
# `topl.launcher.facts.sources` refuses a different file under the same name). vllm-ascend: the
# releases topl's alignment module covers or refuses (launcher/align/targets.py), 0.18.0 on.
SDIST_SHA256 = {
    "vllm-ascend": {
        "0.18.0": "8df042cfaae06fab993bff5f38bb45097634c3f398b2cf74e068347abdddb344",
        "0.19.1rc1": "1e1d27a5cc5775a8b5fc6c09fbae07fb3c5625e5622cdb13d14eb3e2a8837e23",
        "0.20.2rc1": "8ebd5c5b2ef5009baae1c5ddee390a0fe2821ef31aa33312a0b491f5b5185797",
        "0.21.0rc1": "9c0a2e432a2135f46c753c9f5f3718a95ef86872f041ad331028dadfced3e06c",
        "0.22.1rc1": "8b2dc4585ec4f92332afa00dc301f5fbc669904366959a02dce81603a4351d56",
        "0.23.0rc1": "dda0a586c742fbb6e152df27794ce54632947cbdfcd30102ded17ad584eda386",
        "0.23.0": "a58db76eaffcf328b13b315a0db3a57d381a8947d01057ddcefe4ad02372b242",
        "0.23.0.post1": "a3b9f4a5dd7aa50c37e03d1f35937c4ae5aeacc49b734cac74d59ce5757738e1",
        "0.24.0rc1": "56d2949177f3be1c76230cc048adbda5264c7a937ce8e42578ba6fc74d4909ca",
        "0.25.1rc1": "63f1ade8ed4c42f1e78adb5f4afe91be7ae872636b08be89f9b069dd5946e0e4",
        "0.26.0rc1": "647533d9ae77ae765c2c4b88eaa8f2cfcde56cc7621e393e3be63bfb7303d6b3",
        "0.27.1rc1": "6fa8b357b624df4c8810c445da24082a9147009d8fe1db33eff815c8ab9805f0",
        "0.28.0rc1": "bde8bf4207d225df86d8f3b7d9b2bd89ff5e5e56af0cbe4bf8b5b691b98bbe95",
        "0.29.0rc1": "680f58f98b8a8a4d92380f77a5d3949107da6db0b7cfc17834898d32fdfcdfd1",
        "0.30.0rc1": "62466241beb151652e95ae47f1d1f5cb7bf66367d6e5c14c74d6b72c0f026ebe",
        "0.30.0rc2": "05cb51448c0cd174ea338b16ebbfc8e215f44b373ea2a0d65f1314523a01152f",
    }
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
