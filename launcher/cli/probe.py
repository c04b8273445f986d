"""`topl probe [OVERRIDES] [--json] [--prompts N] [--arrival staggered|burst|reversed] [--dump DIR]`."""

from __future__ import annotations

from pathlib import Path

from topl.launcher.cli.output import print_json, print_table


def model_for(spec):
    """Seeded random weights, or real safetensors when model.hf_path is a local folder."""
    import torch

    from topl.kernels.model import Model
    from topl.kernels.probe import DTYPES

    dtype = DTYPES[spec.train.dtype]
    path = Path(spec.model.hf_path).expanduser()
    if path.is_dir() and any(path.glob("*.safetensors")):
        return Model.from_safetensors(spec.model, path, dtype)
    torch.manual_seed(spec.local.seed)
    return Model.random(spec.model, seed=spec.local.seed, dtype=dtype)


def run(spec, prompts: int = 16, arrival: str = "staggered", dump_dir: str | None = None) -> dict:
    from topl.kernels.probe import default_prompt_length, make_requests, probe
    from topl.kernels.rollout import SamplingParams
    from topl.launcher.backends.local import threads_for, torch_threads

    r = spec.rollout
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
    with torch_threads(threads_for(spec)) as n:
        out = _probe(spec, reqs, sp, dump_dir, probe)
    out["threads"] = n
    out["alignment"] = spec.alignment.mode
    out["switches_off"] = [s for s in spec.alignment.SWITCHES if not getattr(spec.alignment, s)]
    return out


def _probe(spec, reqs, sp, dump_dir, probe) -> dict:
    r = spec.rollout
    return probe(
        model_for(spec),
        spec.alignment,
        requests=reqs,
        train_tp=spec.train.tp,
        rollout_tp=r.tp,
        order=spec.collective.order,
        block_size=r.block_size,
        chunked_prefill=r.chunked_prefill,
        max_num_batched_tokens=r.max_num_batched_tokens,
        max_num_seqs=r.max_num_seqs,
        micro_batch=spec.train.log_prob_micro_batch_size_per_gpu,
        sampling=sp,
        dump_dir=dump_dir,
    )


def _fmt(key: str, v) -> str:
    if not isinstance(v, float):
        return str(v)
    return f"{v:.3f}" if key in ("rollout_s", "train_s", "bitwise_equal_fraction") else f"{v:.3e}"


def main(args: list[str]) -> int:
    from topl.launcher.cli.argv import parse
    from topl.launcher.compose import compose_job

    options = {"--prompts": "16", "--arrival": "staggered", "--dump": ""}
    flags, overrides = parse(args, flags=("--json",), options=options)
    as_json, prompts, arrival, dump_dir = flags.json, flags.prompts, flags.arrival, flags.dump
    spec = compose_job(overrides).to_object()
    out = run(spec, int(prompts), arrival, dump_dir or None)
    if dump_dir:
        out["dumps"] = [f"{dump_dir}/rollout", f"{dump_dir}/training"]
    if as_json:
        print_json(out)
    else:
        title = (
            f"topl probe: {spec.model.name}, alignment={out['alignment']}, "
            f"train tp={spec.train.tp} / rollout tp={spec.rollout.tp}"
        )
        rows = [(k, _fmt(k, v)) for k, v in out.items()]
        print_table(title, ("metric", "value"), rows, justify={"value": "right"})
        verdict = (
            "bitwise equal: on-policy"
            if out["max_abs_logprob_diff"] == 0
            else "log-probs differ: off-policy"
        )
        print(verdict)
    return 0 if (out["max_abs_logprob_diff"] == 0 or spec.alignment.mode != "strict") else 1
