"""Stack facts as data. Each fact says what holds, for which versions of one package, and where
that was read. `Evidence` is re-checked in the real packages by `scripts/check_facts.py`:
the `needle` (a substring, or a regex after `re:`) is in `path` (or absent, present=False) in
that release's sdist / wheel (`METADATA` is the wheel's metadata file) or at that GitHub commit.

`package` is the `cluster.versions` key whose version decides (`profile`: the profile name);
`when` is a PEP 440 specifier over it, or several joined by ` || ` (a feature back-ported to
several release lines); "" always, None: in no release. Versions are read by
`topl.launcher.base.versions` (each vendor's order). `patch` names an entry of a declared patch list
(`verl_patches:vllm_pp`) that makes the fact hold on any version.

The checker also proves `when` at its edges (`topl.launcher.facts.bounds`): the releases on both
sides of every boundary, from the registry's release list, must have / lack each `probe` (default:
the fact's present evidence in its own package); `range_note` says why a range cannot be read so.

The facts live by package in `vllm_facts` (vLLM, vllm-ascend) and `stack_facts` (verl, torch_npu,
MindSpeed, CANN, the seed) and `align_facts` (the targets of topl's alignment module); their types and citation helpers in `evidence`. This module is the
one table, in that order.
"""

from __future__ import annotations

from topl.launcher.facts.align_facts import ALIGN_FACTS
from topl.launcher.facts.evidence import Fact
from topl.launcher.facts.stack_facts import STACK_FACTS
from topl.launcher.facts.vllm_facts import VLLM_FACTS

FACTS: tuple[Fact, ...] = VLLM_FACTS + STACK_FACTS + ALIGN_FACTS
