"""`topl probe [OVERRIDES] [--json] [--prompts N] [--arrival staggered|burst|reversed] [--dump DIR]`.

The contract runs first: what `topl check` rejects, the probe rejects with the same rule messages,
except the rules in RUNS_PAST, which concern the cluster rather than the numbers the probe
reproduces on this CPU; the probe then says which of them fired and why it ran anyway.
"""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

from topl.launcher.base.errors import ERROR, WARNING, ToplError
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table
from topl.launcher.contract import check
from topl.launcher.contract.resources import LOCAL_MAX_PARAMS
from topl.launcher.run import engines
from topl.launcher.run.backends.local import threads_for, torch_threads
from topl.launcher.spec.memory import param_counts

_CLUSTER = (
    "about the cluster's devices and world size; the probe runs one replica of each side here"
)
MAX_PROMPTS = 4096  # the probe's requests are a handful of batches, not a dataset
_NOT_TRAINED = "about the training job; the probe only samples and recomputes log-probs"
# Rule id (or id prefix) -> why the probe can run a spec that `topl check` rejects.
RUNS_PAST = {
    "TOP-TP-001": "it emulates the aligned TP reduction (one tree over lcm(train tp, rollout tp) "
    "K-chunks), which the launched engines lack: this verdict is the emulation's",
    "TOP-COLL-": "HCCL settings; the probe emulates collective.order on this CPU",
    "TOP-ENG-001": "the probe emulates TP whatever train.engine",
    "TOP-ENG-003": _NOT_TRAINED,
    "TOP-ENG-004": "the probe generates its own prompts (kernels/probe.py:default_prompt_length)",
    "TOP-ENG-005": "pipeline parallel is not emulated (see the pp/ep note)",
    "TOP-ENG-006": "expert parallel is not emulated (see the pp/ep note)",
    "TOP-ENG-007": _NOT_TRAINED,
    "TOP-ALG-": _NOT_TRAINED,
    "TOP-ALN-003": _NOT_TRAINED,
    "TOP-RES-001": _CLUSTER,
    "TOP-RES-002": "expert parallel is not emulated (see the pp/ep note)",
    "TOP-RES-004": _CLUSTER,
    "TOP-RES-005": _CLUSTER,
    "TOP-RES-006": _CLUSTER,
    "TOP-RES-009": "the probe has its own size guard (the same limit)",
    "TOP-MEM-": _CLUSTER + " (the probe's own size guard applies)",
    "TOP-STACK-": "about the installed stack; the probe runs topl's reference engines",
    "TOP-ENV-": "about the job's environment variables",
    "TOP-VERL-": "about verl overrides; the probe does not run verl",
    "TOP-SEED-": "about a verl patch; the probe seeds every request itself",
    "TOP-CLUS-": _CLUSTER,
}
VERL_UNCHUNKED = (
    "verl@0.9.1:verl/workers/rollout/vllm_rollout/vllm_async_server.py:"
    "vLLMHttpServer._validate_configs"
)


def _runs_past(rule_id: str) -> str | None:
    return next((why for k, why in RUNS_PAST.items() if rule_id.startswith(k)), None)


def progress(msg: str) -> None:
    """Progress for people, on stderr (stdout stays the table or the JSON)."""
    print(f"topl probe: {msg}", file=sys.stderr, flush=True)


def preflight(composed) -> tuple[object, list[str], dict]:
    """(spec, notes, contract summary), or ToplError with check's messages when the probe refuses."""

    vs = check(composed)
    blocking = [v for v in vs if v.severity == ERROR and not _runs_past(v.rule)]
    if blocking:
        raise ToplError(
            "the contract rejects this spec (as `topl check` does):\n"
            + "\n".join(v.render() for v in blocking),
            fix="each error's own fix above (`topl check` with the same overrides agrees)",
        )
    spec = composed.to_object()
    past = [v for v in vs if v.severity == ERROR]
    notes = [
        f"{v.rule} (check rejects it for a launch): {v.message}; probe runs it: "
        f"{_runs_past(v.rule)}"
        for v in past
    ]
    notes += [f"{v.severity} {v.rule}: {v.message}" for v in vs if v.severity != ERROR]
    notes += _layout_notes(spec)
    contract = {
        "launch_ok": not past,
        "run_past": [
            {"rule": v.rule, "message": v.message, "why": _runs_past(v.rule)} for v in past
        ],
        "warnings": [{"rule": v.rule, "message": v.message} for v in vs if v.severity == WARNING],
    }
    size_guard(spec)
    return spec, notes, contract


def _layout_notes(spec) -> list[str]:
    t, r = spec.train, spec.rollout
    other = {
        k: v
        for k, v in (
            ("train.pp", t.pp),
            ("train.ep", t.ep),
            ("train.cp", t.cp),
            ("rollout.pp", r.pp),
            ("rollout.ep", r.ep),
            ("rollout.dp", r.dp),
        )
        if v > 1
    }
    if not other:
        return []
    return [
        "the probe emulates tensor parallel only; "
        + ", ".join(f"{k}={v}" for k, v in other.items())
        + " run as 1 (pipeline stages hand activations on unchanged; data-parallel replicas are "
        "independent; expert parallel is an exact gather only with moe_fixed_combine, "
        "tests/numerics/test_collectives.py, and its native order is not emulated)"
    ]


def size_guard(spec) -> None:
    """Refuse before building what this CPU cannot hold: launch's limit for the local backend
    (TOP-RES-009, the same parameter count), and K splits the TP emulation needs."""

    m = spec.model
    total = param_counts(m)["total"]
    if total > LOCAL_MAX_PARAMS:
        width = {"float32": 4}.get(spec.train.dtype, 2)
        raise ToplError(
            f"model {m.name} has {total / 1e9:.1f}B parameters ({total * width / 1e9:.0f} GB in "
            f"{spec.train.dtype}); the probe builds its model on this CPU and takes at most "
            f"{LOCAL_MAX_PARAMS / 1e6:.0f}M (the local backend's limit, TOP-RES-009)",
            where="model",
            fix="probe the same layout on a small model: add model=tiny_moe (or model=tiny_dense)",
        )
    n = math.lcm(spec.train.tp, spec.rollout.tp)
    ks = {"o_proj": m.num_heads * m.head_dim}
    if not m.num_experts:
        ks["down_proj"] = m.intermediate_size
    bad = {k: v for k, v in ks.items() if v % n}
    if bad:
        raise ToplError(
            f"the TP emulation cuts K into lcm(train.tp, rollout.tp)={n} chunks, which do not "
            "divide " + ", ".join(f"{k} K={v}" for k, v in bad.items()),
            where="train.tp, rollout.tp",
            fix="choose train.tp and rollout.tp whose lcm divides those widths",
        )


def model_for(spec):
    """Seeded random weights, or real safetensors when model.hf_path is a local folder."""
    import torch

    from topl.kernels.model import Model  # lazy: torch only when this runs
    from topl.kernels.probe import DTYPES  # lazy: torch and safetensors only when this runs

    dtype = DTYPES[spec.train.dtype]
    path = Path(spec.model.hf_path).expanduser()
    if path.is_dir() and any(path.glob("*.safetensors")):
        return Model.from_safetensors(spec.model, path, dtype)
    torch.manual_seed(spec.local.seed)
    return Model.random(spec.model, seed=spec.local.seed, dtype=dtype)


def run(
    spec,
    prompts: int = 16,
    arrival: str = "staggered",
    dump_dir: str | None = None,
    report=None,
) -> dict:
    """The probe on a spec (the contract is the caller's: `main` runs `preflight` first).
    `report(msg)`: progress lines."""
    from topl.kernels.probe import (
        default_prompt_length,
        make_requests,
        probe,
    )  # lazy: torch and safetensors only when this runs
    from topl.kernels.rollout import SamplingParams  # lazy: torch only when this runs

    report = report or (lambda msg: None)
    r, e = spec.rollout, engines.engine_settings(spec)
    sp = SamplingParams(
        r.temperature, r.top_p, r.top_k, spec.local.seed, logprobs_mode=r.logprobs_mode
    )
    # prompts long enough to cross KV tiles and cache blocks, so every attention switch is exercised
    max_len = default_prompt_length(spec.alignment.kv_tile, r.block_size)
    reqs = make_requests(
        prompts,
        spec.model.vocab_size,
        spec.local.seed,
        arrival=arrival,
        max_len=max_len,
        max_new=24,
    )
    budget, notes = e.max_num_batched_tokens, []
    longest = max(len(q.prompt) + q.max_new_tokens for q in reqs)
    if not e.chunked_prefill and budget < longest:
        # verl raises an unchunked budget below max_model_len to it (VERL_UNCHUNKED); the probe's
        # own prompts must fit one step likewise
        budget = max(longest, min(spec.model.max_position_embeddings, 1 << 16))
        notes.append(
            f"rollout.chunked_prefill=false with max_num_batched_tokens="
            f"{r.max_num_batched_tokens} < a probe sequence of {longest} tokens: the budget is "
            f"raised to {budget}, as verl raises it to max_model_len ({VERL_UNCHUNKED})"
        )
    with torch_threads(threads_for(spec)) as n:
        report(f"building {spec.model.name} ({spec.train.dtype}, seed {spec.local.seed})")
        model = model_for(spec)
        report(f"rollout of {prompts} prompts, then the training recompute")
        out = probe(
            model,
            spec.alignment,
            requests=reqs,
            train_tp=e.train_tp,
            rollout_tp=e.rollout_tp,
            order=e.order,
            block_size=e.block_size,
            chunked_prefill=e.chunked_prefill,
            max_num_batched_tokens=budget,
            max_num_seqs=e.max_num_seqs,
            micro_batch=e.log_prob_micro_batch,  # the probe's training pass is the recompute
            sampling=sp,
            dump_dir=dump_dir,
        )
    out["threads"] = n
    out["alignment"] = spec.alignment.mode
    out["switches_off"] = [s for s in spec.alignment.SWITCHES if not getattr(spec.alignment, s)]
    if notes:
        out["notes"] = notes
    return out


def _fmt(key: str, v) -> str:
    if not isinstance(v, float):
        return str(v)
    return f"{v:.3f}" if key in ("rollout_s", "train_s", "bitwise_equal_fraction") else f"{v:.3e}"


def main(args: list[str]) -> int:
    from topl.launcher.compose.hydra import (
        compose_job,
    )  # lazy: Hydra and OmegaConf only when this runs

    options = {"--prompts": "16", "--arrival": "staggered", "--dump": ""}
    flags, overrides = parse(args, flags=("--json",), options=options)
    as_json, prompts, arrival, dump_dir = flags.json, flags.prompts, flags.arrival, flags.dump
    if arrival not in ("staggered", "burst", "reversed"):
        raise ToplError(f"--arrival {arrival}", fix="--arrival staggered|burst|reversed")
    # ASCII digits only: `isdigit` also takes `²`, which int() refuses; bounded (each prompt is a
    # rollout and a recompute on the CPU emulation)
    if not (prompts.isascii() and prompts.isdigit()) or not 1 <= int(prompts) <= MAX_PROMPTS:
        raise ToplError(
            f"--prompts {prompts!r}: expected a whole number from 1 to {MAX_PROMPTS}",
            fix=f"--prompts N with 1 <= N <= {MAX_PROMPTS} (default 16)",
        )
    spec, notes, contract = preflight(compose_job(overrides))
    out = run(spec, int(prompts), arrival, dump_dir or None, report=progress)
    notes += out.pop("notes", [])
    if dump_dir:
        out["dumps"] = [f"{dump_dir}/rollout", f"{dump_dir}/training"]
    exact = out["max_abs_logprob_diff"] == 0
    if as_json:
        print_json({**out, "contract": contract, "notes": notes})
    else:
        for note in notes:  # wrapped: piped lines stay short
            print(
                textwrap.fill(note, 100, initial_indent="note: ", subsequent_indent="  "),
                file=sys.stderr,
            )
        title = (
            f"topl probe: {spec.model.name}, alignment={out['alignment']}, "
            f"train tp={spec.train.tp} / rollout tp={spec.rollout.tp}"
        )
        rows = [(k, _fmt(k, v)) for k, v in out.items()]
        print_table(title, ("metric", "value"), rows, justify={"value": "right"})
        verdict = "bitwise equal: on-policy" if exact else "log-probs differ: off-policy"
        if exact and not contract["launch_ok"]:
            ids = ", ".join(sorted({p["rule"] for p in contract["run_past"]}))
            verdict += f" in the emulation; `topl check` rejects this spec for a launch ({ids})"
        print(verdict)
    return 0 if (exact or spec.alignment.mode != "strict") else 1
