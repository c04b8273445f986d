"""The rendered command against the verl the stack declares (`topl.launcher.facts.verl_schema`).

Each rule renders the spec (pure, cheap) and reads the declared version's schema, loaded once per
version: a key that version lacks, a value it asserts against at start-up, a variable a shell
would have expanded, a stock verl that cannot run strict Megatron.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.facts.verl_schema import SCHEMA_KEYS, schema_for
from topl.launcher.facts.verl_tables import GRAD_OFFLOAD
from topl.launcher.render.command import command
from topl.launcher.render.spelling import secret_vars, spell, unset_vars
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_strict
from topl.launcher.spec.view import RENDERED, unwrap

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.facts.verl_schema import Schema
    from topl.launcher.render.command import Command
    from topl.launcher.spec.job import JobSpec

MEGATRON_NODE = ".megatron."


def _rendered(s: JobSpec) -> tuple[Command, Schema] | None:
    """(command, schema) of the spec, or None where it renders no verl command (the local
    backend). The command map (topl.launcher.render.command) is built once per spec for every rule;
    rules read it through `keys_by` / `typed`, which plan's trace follows entry by entry."""

    plain = unwrap(s, *SCHEMA_KEYS, "cluster.backend", RENDERED)
    if not backend_traits.of(plain).remote:  # the reference engines run no verl command
        return None
    return command(plain), schema_for(plain)


@rule(
    "TOP-SCHEMA-001",
    ERROR,
    "every key topl renders exists in the declared verl (or below a mapping it passes on)",
    ("cluster.versions.verl", "cluster.versions.verl_patches", "verl_overrides"),
    "declare a stack whose verl has the key (`stack=seed` for the seed's patched verl 0.8.0), "
    "or unset the field / verl_overrides entry that renders it",
)
def key_in_version(s: JobSpec) -> Outcome:
    """Hydra refuses an unknown key, verl's dataclasses one they do not declare, after the job is
    submitted. The keys are the declared release's own config, composed
    (launcher/facts/verl_schema/verl-<version>.json), plus what a declared verl patch adds."""

    got = _rendered(s)
    if got is None:
        return None
    cmd, sch = got
    _ = (s.cluster.versions.verl, s.cluster.versions.verl_patches)  # recorded as read
    # topl's own keys still in the command (verbatim ones are TOP-VERL-001's, which names their
    # source); only the keys: their values do not decide a key's spelling
    bad = [k for k in cmd.keys_by(("topl",)) if spell(k, sch) is None]
    if bad:
        patched = f" + {', '.join(sch.patches)}" if sch.patches else ""
        return f"verl {sch.version}{patched} ({sch.config}) has no {', '.join(bad)} ({sch.source})"


@rule(
    "TOP-SCHEMA-002",
    ERROR,
    "train.grad_offload on a verl without it agrees with train.param_offload",
    ("train.engine", "train.grad_offload", "train.param_offload", "cluster.versions.verl"),
    "set train.grad_offload to train.param_offload's value (or unset it), or declare verl 0.8.0/0.9.0",
)
def grad_offload(s: JobSpec) -> Outcome:
    """verl 0.9.1 dropped McoreEngineConfig.grad_offload: its param_offload also releases the
    gradient buffers (verl@0.9.1:verl/workers/config/engine.py:McoreEngineConfig.param_offload),
    so topl renders grad_offload there only through param_offload, which must say the same."""

    t = s.train
    if t.engine != "megatron" or t.grad_offload is None:
        return None
    sch = schema_for(unwrap(s, *SCHEMA_KEYS))
    if sch.has(GRAD_OFFLOAD) or t.grad_offload == t.param_offload:
        return None
    return (
        f"verl {sch.version} has no {GRAD_OFFLOAD}: train.grad_offload={t.grad_offload} cannot "
        f"be rendered with train.param_offload={t.param_offload}"
    )


@rule(
    "TOP-SCHEMA-003",
    ERROR,
    "strict Megatron needs a verl that keeps MindSpeed's attention patch single",
    ("alignment.mode", "train.engine", "cluster.versions.verl", "cluster.versions.verl_patches"),
    "declare `stack=seed` (verl 0.8.0 + verl_mindspeed_batch_invariant.patch) or verl >= 0.9.0",
    facts=("mindspeed_bi_repatch",),
)
def mindspeed_repatch(s: JobSpec) -> Outcome:
    """Strict renders use_flash_attn_npu_batch_invariant; stock verl 0.8.0 still sets MindSpeed's
    use_flash_attn, so both register DotProductAttention.forward and the training workers stop
    ("the patch of forward exist"). verl 0.9.0 fixed it; the seed ships the same fix as a patch."""
    if not (is_strict(s) and s.train.engine == "megatron"):
        return None
    vs = s.cluster.versions
    if facts.supports("mindspeed_bi_repatch", unwrap(vs, "cluster.versions")):
        return None
    return (
        f"verl {vs.verl} (verl_patches {list(vs.verl_patches)}) sets MindSpeed's use_flash_attn "
        "next to the batch-invariant flash attention strict renders: the attention patch is "
        "registered twice at worker start"
    )


@rule(
    "TOP-SCHEMA-004",
    ERROR,
    "no value refers to a shell variable unset where topl launches, or to a secret",
    ("verl_overrides", "data_dir"),
    "export the variable before launching, or write the path out in the recipe; a secret goes "
    "to the job only through cluster.env (`+cluster.env.NAME='${oc.env:NAME}'`)",
)
def shell_variables(s: JobSpec) -> Outcome:
    """topl starts verl without a shell: `$HOME` / `${VAR}` / `~/` in a value are expanded at render
    time from the launching environment; an unset one would reach verl as its literal name, a
    secret one would put the secret on verl's command line."""

    got = _rendered(s)
    if got is None:
        return None
    _ = (s.verl_overrides, s.data_dir)  # recorded: where such values come from
    # topl's keys and verl_overrides (extra_overrides are TOP-VERL-001's); only a string or a
    # list can name a variable (unset_vars skips every other value)
    texts = got[0].typed(("topl", "verl_overrides"), (str, list, tuple))
    pairs = [(e.key, e.value) for e in texts]
    unset, secret = unset_vars(pairs), secret_vars(pairs)
    if unset or secret:  # a secret expanded here would be on verl's argv (`ps`)
        return "; ".join(
            [f"{k} refers to ${', $'.join(v)} (unset)" for k, v in unset.items()]
            + [
                f"{k} refers to ${', $'.join(v)} (a secret: argv is public)"
                for k, v in secret.items()
            ]
        )


@rule(
    "TOP-SCHEMA-005",
    ERROR,
    "train=fsdp renders no Megatron key",
    ("train.engine", "verl_overrides"),
    "remove the Megatron entries from verl_overrides (a recipe for train=megatron), or keep "
    "train=megatron",
)
def fsdp_without_megatron(s: JobSpec) -> Outcome:
    """verl reads `*.megatron.*` only with model_engine=megatron; on FSDP they are silently unused,
    so a Megatron layout the recipe states would not be the one that runs."""
    if s.train.engine != "fsdp":
        return None
    keys = [k for k in s.verl_overrides if MEGATRON_NODE in k or "mindspeed" in k]
    if keys:
        return "train=fsdp with Megatron keys in verl_overrides: " + ", ".join(sorted(keys))


@rule(
    "TOP-SCHEMA-006",
    ERROR,
    "Megatron trains in bfloat16 or float16",
    ("train.engine", "train.dtype"),
    "set train.dtype=bfloat16 (or float16), or train=fsdp for float32",
)
def megatron_dtype(s: JobSpec) -> Outcome:
    """verl asserts it when the engine config is built
    (verl@0.8.0..0.9.1:verl/workers/config/engine.py:McoreEngineConfig.__post_init__:
    `assert self.dtype in ["bfloat16", "float16"]`)."""
    if s.train.engine == "megatron" and s.train.dtype not in ("bfloat16", "float16"):
        return f"verl's Megatron engine refuses dtype {s.train.dtype}"
