"""Render a job spec into the exact invocation of the verl its stack declares. Pure but for one
read: `$VAR` / `~/` in override values are expanded from the launching environment (`environ`).

`VERL_KEYS` (in verl_tables.py, with the other key tables the contract reads too) is the one
table from spec fields to verl keys; each key is spelled (plain, `+`, or
another name) as the declared verl's schema says (render_version.py, verl_schema.py). The slow
tests compose every rendering against that verl's real config and run its validate_config. The environment lives in
render_env.py, the stack-dependent keys in render_stack.py; every name is importable from here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ToplError
from topl.launcher.base.redact import REDACTED
from topl.launcher.facts.verl_schema import schema, schema_for
from topl.launcher.facts.verl_tables import (
    ARR,
    CODE_KEYS,
    CRITIC_MEGATRON_KEYS,
    FSDP_KEYS,
    MEGATRON_KEYS,
    VERL_KEYS,
)
from topl.launcher.render.env import argv_env, env_vars, secret_names
from topl.launcher.render.spelling import (
    expand,
    respell,
    secret_vars,
    spell,
    unset_vars,
    unspellable,
    verl_override_items,
)
from topl.launcher.render.stack import graph_overrides, rendered_value, renders, stack_overrides
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_strict

if TYPE_CHECKING:
    from topl.launcher.facts.verl_schema import Schema
    from topl.launcher.spec.job import JobSpec


@dataclass
class Invocation:
    """What to run: `python -m entrypoint --config-name=... overrides`, with env on every process.

    `env` holds real values, secrets included (the backends pass them on); `command()` and
    `to_dict()` show a secret by name only, and no override carries one."""

    entrypoint: str
    config_name: str
    overrides: list[str]
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def argv(self) -> list[str]:
        return ["-m", self.entrypoint, f"--config-name={self.config_name}", *self.overrides]

    @property
    def secrets(self) -> list[str]:
        """Names of the env entries passed by environment only (never argv, files or output)."""
        return secret_names(self.env)

    def command(self, python: str = "python3") -> str:
        """A runnable command line; a secret is read from the running shell (`NAME=${NAME:?..}`:
        bash does not split an assignment, and stops with the message when NAME is unset)."""
        hidden = set(self.secrets)
        assigns = [
            f"{k}=${{{k}:?is a secret: export it first}}"
            if k in hidden
            else f"{k}={shlex.quote(v)}"
            for k, v in self.env.items()
        ]
        # the assignments packed into lines of at most ENV_WIDTH (one was 937 characters)
        lines: list[str] = []
        for a in assigns:
            if lines and len(lines[-1]) + 1 + len(a) <= ENV_WIDTH:
                lines[-1] += " " + a
            else:
                lines.append(a)
        env = " \\\n  ".join(lines)
        head = " ".join(shlex.quote(a) for a in [python, *self.argv[:3]])
        args = " \\\n    ".join([head, *(shlex.quote(a) for a in self.overrides)])
        return f"{env} \\\n  {args}" if env else args

    def to_dict(self, python: str = "python3") -> dict[str, Any]:
        hidden = set(self.secrets)
        return {
            "entrypoint": self.entrypoint,
            "config_name": self.config_name,
            "overrides": self.overrides,
            "env": {k: REDACTED if k in hidden else v for k, v in self.env.items()},
            "secrets": sorted(hidden),
            "command": self.command(python),
        }


ENV_WIDTH = 96  # the environment's lines in a printed command (the overrides: one a line)
_PLAIN = re.compile(r"^[A-Za-z0-9_./:@\-]+$")
_LOOKS_TYPED = re.compile(r"^([-+]?[0-9_.]+([eE][-+]?[0-9]+)?|true|false|null|none|inf|nan)$", re.I)


def fmt(v: Any) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x) for x in v) + "]"
    s = str(v)
    if isinstance(v, str) and _LOOKS_TYPED.match(s):
        return (
            f'"{s}"'  # Hydra would read 1 / true / null as non-strings (Ray needs str env values)
        )
    return s if _PLAIN.match(s) else '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plus(key: str, sch: Schema | None = None) -> str:
    """The override name on the declared verl (`sch`, default verl 0.9.1): `key` where it has
    the key, `+key` below a mapping it passes on; a key it cannot take is returned as written
    (contract/verl_version.py refuses it, `render` raises)."""

    return spell(key, sch or schema("0.9.1")) or key


def data_files(s: JobSpec, which: str) -> Any:
    """The spec's train_files / val_files, else the data_dir convention."""
    files = s.train_files if which == "train" else s.val_files
    if files is not None:
        return list(files)
    return f"{s.data_dir}/{'train' if which == 'train' else 'test'}.parquet"


def overrides(s: JobSpec) -> list[tuple[str, Any]]:
    """(verl key, value) pairs, in a stable order."""
    megatron = s.train.engine == "megatron"
    table = {**VERL_KEYS, **(MEGATRON_KEYS if megatron else FSDP_KEYS)}
    out: list[tuple[str, Any]] = [("model_engine", "megatron" if megatron else "dp")]
    out += [
        (verl, v)
        for field_, verl in table.items()
        if renders(s, field_) and (v := rendered_value(s, field_)) is not None
    ]  # None: verl's default
    out += [
        ("data.train_files", data_files(s, "train")),
        ("data.val_files", data_files(s, "val")),
        *graph_overrides(s),
        (f"{ARR}.rollout.pipeline_model_parallel_size", 1),
        # verl asserts it equals actor.use_dynamic_bsz (verl@0.9.1:verl/workers/engine_workers.py:
        # ActorRolloutRefWorker.init_model)
        (f"{ARR}.rollout.log_prob_use_dynamic_bsz", s.train.use_dynamic_bsz),
        ("trainer.logger", ["console", "file"]),
    ]
    if s.algorithm.use_kl_loss:
        out.append(
            (
                f"{ARR}.ref.log_prob_micro_batch_size_per_gpu",
                s.train.log_prob_micro_batch_size_per_gpu,
            )
        )
    if s.algorithm.use_critic:
        out += [
            ("critic.ppo_micro_batch_size_per_gpu", s.train.ppo_micro_batch_size_per_gpu),
            ("critic.model.path", s.model.hf_path),
        ]
        if megatron:
            out += [(k, rendered_value(s, f)) for f, k in CRITIC_MEGATRON_KEYS.items()]
    out += stack_overrides(s)
    out += algorithm_overrides(s)
    # FSDP gets no fsdp_config.full_determinism: it makes FSDPEngine call enable_full_determinism
    # (verl@0.9.1:verl/workers/engine/fsdp/transformer_impl.py:FSDPEngine.__init__), which sets
    # os.environ["HCCL_DETERMINISTIC"] = "true" in the actor/ref process on NPU
    # (verl@0.9.1:verl/workers/engine/utils.py:enable_full_determinism), replacing the `strict`
    # TOP-COLL-001 requires behind the contract's and the guard's back.
    if is_strict(s) and megatron:
        otc = f"{ARR}.actor.megatron.override_transformer_config"
        out += [
            (f"{otc}.attention_backend", "flash"),
            (f"{otc}.use_flash_attn_npu_batch_invariant", True),
            (f"{otc}.batch_invariant_mode", True),
            (f"{otc}.use_batch_invariant_ops", True),
        ]
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated":
        out += [
            (f"algorithm.rollout_correction.{k}", getattr(rc, k))
            for k in (
                "rollout_is",
                "rollout_is_threshold",
                "rollout_rs",
                "rollout_rs_threshold",
                "bypass_mode",
            )
        ]
    if s.train.dtype is not None:  # the ref computes log-probs too (KL): same dtype
        eng = "megatron" if megatron else "fsdp_config"
        out += [(f"{ARR}.ref.{eng}.dtype", s.train.dtype), (f"{ARR}.rollout.dtype", s.train.dtype)]
    out += extra_items(s.algorithm.extra_overrides)
    return respell(with_verl_overrides(out, s.verl_overrides), schema_for(s))


def extra_items(extra: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """extra_overrides as (dotted verl key, value): nested mappings (what `+algorithm.extra_overrides.
    a.b=1` composes into) become dotted keys, as verl's override grammar needs."""
    out = []
    for k, v in extra.items():
        key = f"{prefix}{k}"
        out += extra_items(v, key + ".") if isinstance(v, dict) and v else [(key, v)]
    return out


def with_verl_overrides(
    pairs: list[tuple[str, Any]], verbatim: dict[str, Any]
) -> list[tuple[str, Any]]:
    """`verbatim` (key, possibly `+key`) replaces a rendered key of the same name (and goes last);
    nested entries (`+verl_overrides.a.b=v`) become dotted keys (spelling.verl_override_items)."""
    out = dict(pairs)
    for k, v in verl_override_items(verbatim):
        if set(k.lstrip("+").split(".")) & CODE_KEYS:
            raise ToplError(
                f"verl_overrides.{k}: recipes are data and never instantiate code in verl",
                where="verl_overrides",
                fix=f"remove `{k}`",
            )
        out.pop(k.lstrip("+"), None)
        out[k] = v
    return list(out.items())


def overlong_buffer_len(s: JobSpec) -> int:
    """DAPO's overlong buffer in tokens: the last fraction of max_response_length."""
    return round(s.algorithm.overlong_buffer_fraction * s.train.max_response_length)


def algorithm_overrides(s: JobSpec) -> list[tuple[str, Any]]:
    """GAE, critic, DAPO dynamic sampling and overlong shaping, only where the algorithm uses them."""
    a = s.algorithm
    out: list[tuple[str, Any]] = []
    if a.adv_estimator == "gae":
        out += [("algorithm.gamma", a.gamma), ("algorithm.lam", a.lam)]
    if a.use_critic:
        out.append(("critic.cliprange_value", a.cliprange_value))
    if a.filter_groups:  # verl@0.9.1:verl/trainer/config/algorithm.py:FilterGroupsConfig
        out += [
            ("algorithm.filter_groups.enable", True),
            ("algorithm.filter_groups.metric", a.filter_groups_metric),
            ("algorithm.filter_groups.max_num_gen_batches", a.max_num_gen_batches),
        ]
    cfg = "reward.reward_kwargs.overlong_buffer_cfg"
    if a.overlong_buffer is not None:  # explicit verl-level fields (VERL_KEYS rows) say the rest
        if a.overlong_buffer:
            out.append((f"{cfg}.penalty_factor", a.overlong_penalty_factor))
    elif (
        a.overlong_buffer_fraction > 0
    ):  # verl@0.9.1:verl/workers/reward_manager/dapo.py:DAPORewardManager
        out += [
            ("reward.reward_manager.name", "dapo"),
            (f"{cfg}.enable", True),
            (f"{cfg}.len", overlong_buffer_len(s)),
            (f"{cfg}.penalty_factor", a.overlong_penalty_factor),
            ("reward.reward_kwargs.max_resp_len", s.train.max_response_length),
        ]
    return out


def render(s: JobSpec, environ: Mapping[str, str] | None = None) -> Invocation:
    """JobSpec -> Invocation. Env vars reach every Ray worker: the non-secret ones through
    `ray_kwargs.ray_init.runtime_env.env_vars` on the command line (verl merges it into ray.init,
    verl@0.9.1:verl/trainer/main_ppo.py:run_ppo), secrets only through the backend, because verl
    prints that runtime_env and its whole resolved config (same file, run_ppo and TaskRunner.run)."""
    pairs = overrides(s) + [
        (f"ray_kwargs.ray_init.runtime_env.env_vars.{k}", v) for k, v in argv_env(s).items()
    ]
    config_name = s.algorithm.config_name or "ppo_trainer"
    sch = schema_for(s)
    bad = unspellable(pairs, sch)
    if bad:  # contract/verl_version.py (TOP-SCHEMA-001) says the same before launch
        raise ToplError(
            f"verl {sch.version} ({sch.config}) has no {', '.join(bad)}: the command cannot compose",
            where="cluster.versions.verl",
            fix="declare the verl that has the key (stack=...), or unset the field that renders it",
        )
    # verl's argv is public (`ps`); the local backend starts no verl (TOP-SCHEMA-004 says the same)
    secret = secret_vars(pairs, environ) if backend_traits.of(s).remote else {}
    if secret:
        names = sorted({n for ns in secret.values() for n in ns})
        raise ToplError(
            f"{', '.join(secret)} refer to {', '.join('$' + n for n in names)}, a secret: "
            "expanded here it would be on verl's command line, readable by everyone (`ps`)",
            where="verl_overrides / the spec's values",
            fix="drop the reference; a secret reaches the job only through cluster.env "
            f"(`+cluster.env.{names[0]}='${{oc.env:{names[0]}}}'`)",
        )
    unset = unset_vars(pairs, environ)
    if unset:  # TOP-SCHEMA-004
        names = sorted({n for ns in unset.values() for n in ns})
        raise ToplError(
            f"{', '.join(unset)} refer to {', '.join('$' + n for n in names)}, unset here; verl "
            "starts without a shell and would read the name literally",
            where="verl_overrides",
            fix=f"export {names[0]}=... before launching, or write the path out",
        )
    args = [f"{spell(k, sch)}={fmt(expand(v, environ))}" for k, v in pairs]
    return Invocation(s.algorithm.entrypoint, config_name, args, env_vars(s))
