"""`topl check --deep`: the rendered command (the argv the backend runs) dry-run by the verl the spec
declares, in a child Python with that verl first on sys.path (verl_side.py), each failure reported
as a contract violation: a TOP-DRY-* id, verl's own message, the topl keys behind the verl keys it
involves (the command's entries carry their origin) and a fix. Where that verl cannot be found or
imported, one warning says so (TOP-DRY-000). verl is imported in the child only: this module keeps
`check` without --deep as fast as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topl.launcher.base import children
from topl.launcher.base.errors import ERROR, WARNING, ToplError
from topl.launcher.contract.core import Violation
from topl.launcher.contract.dryrun import releases
from topl.launcher.contract.runtime import DEEP, RuntimeRule
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.render.command import command
from topl.launcher.render.invocation import render
from topl.launcher.spec import backend_traits

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed
    from topl.launcher.render.command import Command
    from topl.launcher.spec.job import JobSpec


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    fix: str


# stage (verl_side.py) -> the id a user meets; listed by `topl rules` (contract/runtime.py)
STAGES = {
    "import": Stage(
        "TOP-DRY-000",
        "the declared verl is at hand for the dry run",
        "install the declared verl here, or let topl fetch its wheel (`topl check --deep`"
        " downloads it with pip into ~/.cache/topl-verl); the fast rules still ran",
    ),
    "compose": Stage(
        "TOP-DRY-001",
        "verl's Hydra config composes the command",
        "fix or remove the key verl names (a key the declared verl lacks, a wrong type)",
    ),
    "validate_config": Stage(
        "TOP-DRY-002",
        "verl's validate_config accepts the command",
        "change the keys verl's message names (see the keys listed)",
    ),
    "dataclass": Stage(
        "TOP-DRY-003",
        "every config dataclass the workers build accepts its node",
        "change the keys verl's message names in the node listed",
    ),
    "mesh": Stage(
        "TOP-DRY-004",
        "the training engines' device meshes cover the world",
        "make each parallel size divide the device count (trainer.nnodes x n_gpus_per_node)",
    ),
    "batch_split": Stage(
        "TOP-DRY-005",
        "each step-1 pass splits into whole micro batches / budgets",
        "make the micro batch divide the per-rank batch, or the token budget hold prompt"
        " + response",
    ),
    "rollout_replica": Stage(
        "TOP-DRY-006",
        "rollout replicas and vLLM's engine arguments are valid",
        "make a replica (tp x dp x pp) whole nodes or part of one; keep "
        "max_num_batched_tokens >= max_num_seqs",
    ),
    "algorithm": Stage(
        "TOP-DRY-007",
        "the algorithm's names and thresholds are verl's",
        "use a name verl registers / a threshold its parser takes",
    ),
    "trainer": Stage(
        "TOP-DRY-008",
        "the trainer's own start-up checks pass",
        "make train_batch_size a multiple of gen_batch_size; set filter_groups.metric",
    ),
    "megatron": Stage(
        "TOP-DRY-010",
        "megatron-core accepts each Megatron engine's layout",
        "make the Megatron sizes megatron-core's message names divide what it says (layers per "
        "stage, the device count), and the recompute settings one it takes",
    ),
    "model": Stage(
        "TOP-DRY-011",
        "the model files verl reads while it validates are at hand for the dry run",
        "dry-run where the model path resolves (the cluster's head, or with the hub reachable); "
        "verl reads them on the cluster either way, and the other start-up checks ran",
    ),
    "internal": Stage(
        "TOP-DRY-009",
        "the dry run itself ran",
        "report it: the dry run failed where verl did not (the rest of check ran)",
    ),
}
STAGES["vllm_engine"] = STAGES["rollout_replica"]
FIXES = {  # check -> a fix more precise than its stage's
    "use_mbridge": "drop use_mbridge=false from verl_overrides / extra_overrides",
    "vllm_scheduler": "raise rollout.max_num_batched_tokens to at least rollout.max_num_seqs",
    "replica_nodes": "make rollout tp*dp*pp a divisor or a multiple of devices_per_node",
    "token_budget": "raise the token budget named to at least max_prompt_length + max_response_length",
    "micro_divides": "make the micro batch named divide the per-rank batch the message gives",
    "ulysses_remove_padding": "keep actor_rollout_ref.model.use_remove_padding=true with ulysses_sp > 1",
}


def catalog() -> list[RuntimeRule]:
    """The dry run's ids for `topl rules` (each stage once; vllm_engine shares rollout_replica's)."""
    seen = {st.id: st for st in STAGES.values()}
    why = (
        "verl's own start-up check, run on CPU by the declared verl (launcher/contract/dryrun; "
        "docs/startup.md): the message is verl's, with the topl keys behind the verl keys"
    )
    return [
        RuntimeRule(
            st.id,
            WARNING if st.id in ("TOP-DRY-000", "TOP-DRY-009") else ERROR,
            st.title,
            ("cluster.versions.verl",),
            st.fix,
            why,
            DEEP,
        )
        for st in seen.values()
    ]


QUOTED = re.compile(
    r"'((?:actor_rollout_ref|critic|data|algorithm|trainer|reward|model_engine)[\w.]*)'"
)
DOTTED = re.compile(r"\b[a-z_]\w*(?:\.[a-z_]\w*)+")
TIMEOUT = 300.0
MODEL = ("num_layers", "num_heads", "num_kv_heads", "num_experts", "hidden_size")


def where(spec: JobSpec, fetch: bool) -> tuple[os.PathLike[str] | str | None, str]:
    """(the folder holding the declared `verl/`, "") or (None, why it is not at hand)."""
    version = str(spec.cluster.versions.verl)
    root = releases.installed_root(version) or releases.cached_root(version)
    if root is not None:
        return root, ""
    if not fetch:
        return None, f"verl {version} is neither installed here nor cached in {releases.cache()}"
    try:
        return releases.release_root(version), ""
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", b"") or b""
        last = (err.decode(errors="replace").strip().splitlines() or [str(e)])[-1]
        return None, f"verl {version} could not be fetched with pip ({last})"


def request(spec: JobSpec, root: os.PathLike[str] | str) -> dict[str, Any]:
    """What the child dry-runs: the rendered invocation, on the declared verl's config folder."""
    inv = render(spec)
    sch = schema_for(spec)
    vs = spec.cluster.versions
    conf = releases.config_dir(Path(root), str(vs.verl), tuple(vs.verl_patches or ()))
    return {
        "conf": str(conf),
        "config_name": inv.config_name,
        "entrypoint": inv.entrypoint,
        "overrides": inv.overrides,
        "patch_keys": sorted(sch.cites),
        # verl 0.9.1 raises an unchunked token budget to max_model_len itself (TOP-ENG-008's fact)
        "raises_budget": sch.version not in ("0.8.0", "0.9.0"),
        # the sizes megatron-core's checks read (verl reads them from the model's config.json)
        "model": {k: getattr(spec.model, k) for k in MODEL},
    }


def run_child(
    root: os.PathLike[str] | str, requests: list[dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    """verl_side over `requests` in one child (one import of verl for all); a failure per request."""
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(root)}
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    cmd = [sys.executable, "-m", "topl.launcher.contract.dryrun.verl_side"]
    try:
        got = children.run(cmd, TIMEOUT, env=env, input=lines)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [
            [{"stage": "import", "check": "import", "message": f"the dry run did not finish: {e}"}]
        ] * len(requests)
    answers = [json.loads(x) for x in got.stdout.splitlines() if x.startswith("[")]
    if len(answers) != len(requests):
        tail = (got.stderr.strip().splitlines() or [f"exit {got.returncode}"])[-1]
        return [
            [{"stage": "import", "check": "import", "message": f"verl's process stopped: {tail}"}]
        ] * len(requests)
    return answers


def deep(composed: Composed, fetch: bool = True) -> tuple[list[Violation], str]:
    """(the dry run's violations, a note for people) for one composed job."""
    spec = composed.to_object()
    if not backend_traits.of(spec).remote:
        return [], f"dry run: backend={spec.cluster.backend} runs no verl, nothing to dry-run"
    root, why = where(spec, fetch)
    if root is None:
        return [unavailable(spec, why)], ""
    try:
        req = request(spec, root)
    except ToplError as e:  # the command cannot be rendered: the rules have said why
        return [], f"dry run: not run, the command cannot be rendered ({e.message})"
    failures = run_child(root, [req])[0]
    vs = [violation(f, composed, spec) for f in failures]
    return vs, f"dry run: verl {spec.cluster.versions.verl} ({root}) ran its start-up checks"


def unavailable(spec: JobSpec, why: str) -> Violation:
    st = STAGES["import"]
    v = str(spec.cluster.versions.verl)
    keys = {
        "cluster.versions.verl": {"value": v, "source": f"stack={spec.cluster.versions.profile}"}
    }
    return Violation(st.id, WARNING, f"no dry run: {why}", keys, st.fix)


def violation(f: dict[str, Any], composed: Composed, spec: JobSpec) -> Violation:
    """One verl failure as a violation: the topl keys behind each verl key it involves."""
    st = STAGES.get(f["stage"], STAGES["internal"])
    sev = WARNING if f["stage"] in ("import", "internal", "model") else ERROR
    cmd = command(spec)
    keys: dict[str, dict[str, Any]] = {}
    for k in involved(f, cmd):
        e = cmd.entry(k)
        if e is None:
            sch = schema_for(spec)
            value = sch.default(k) if sch.has(k) else None
            keys[k] = {
                "value": value,
                "source": f"verl {sch.version}'s default (not in the command)",
            }
        else:
            name = e.origin or e.key
            src = composed.source(e.origin) if e.origin else "topl"
            keys[name] = {"value": e.value, "source": f"{src}; verl key {e.key}"}
    cite = f" [{f['cite']}]" if f.get("cite") else ""
    fix = FIXES.get(f["check"], st.fix)
    return Violation(st.id, sev, f"{f['check']}: {f['message']}{cite}", keys, fix)


def involved(f: dict[str, Any], cmd: Command) -> list[str]:
    """The verl keys a failure names: its own list (a node's prefix widened to the command's keys
    below it that its message mentions), and any key verl quotes in its message."""
    out: list[str] = []
    msg = f["message"]
    for k in f.get("keys", []):
        below = [e.key for e in cmd if e.key.startswith(k + ".")]
        if below:  # a dataclass node: the entries whose name the message mentions
            out += [b for b in below if re.search(rf"\b{re.escape(b.rsplit('.', 1)[1])}\b", msg)]
        else:
            out.append(k)
    out += QUOTED.findall(msg)
    # a key verl names unquoted, whole or by its last parts ("router_replay.mode='R2' requires
    # algorithm.rollout_correction.bypass_mode=False"): the command's entries it names
    for token in DOTTED.findall(msg):
        out += [e.key for e in cmd if e.key == token or e.key.endswith("." + token)]
    return list(dict.fromkeys(out))
