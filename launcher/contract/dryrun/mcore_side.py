"""The dry run's child, megatron-core's part: its own config checks (TransformerConfig,
get_num_layers_to_build) on each Megatron engine's layout, called where megatron-core imports, over
mcore.py's mirror (which alone covers parallel_state and the MoE layer: they need a process group).
verl_side.py calls `megatron` after verl's own checks.
"""

from __future__ import annotations

from typing import Any

from topl.launcher.contract.dryrun import mcore, mirror
from topl.launcher.contract.dryrun.calls import quiet, text

# override_transformer_config keys TransformerConfig's layout checks read (verl passes the whole
# dict on; the rest are kernel switches, some of them MindSpeed's own fields)
TC_KEYS = ("sequence_parallel", "recompute_granularity", "recompute_method", "recompute_num_layers")
TC_KEYS += ("recompute_modules", *mcore.UNEVEN)


def megatron(get: mirror.Get, model: dict[str, int], engines: tuple[str, ...], fail: Any) -> list:
    """megatron-core's own checks of each engine's layout: what needs a process group mirrored
    (mcore.py); the config checks called where megatron-core imports and the mirror refuses the
    layout (megatron-core's own message) or cannot judge it (an uneven pipeline split), else
    mirrored. Importing megatron-core costs CPU (0.5-3 s by load): a layout the mirror passes, which
    tests/contract/test_mcore_layout.py holds to megatron-core's own config, does not pay it."""
    m = mcore.Model(*(model[f] for f in mcore.Model._fields))
    mirrored = mcore.layout(get, m, engines)
    uneven = any(
        get(mcore.sizes(get, r).otc + u) not in (None, False) for r in engines for u in mcore.UNEVEN
    )
    if not uneven and not any(f.check in mcore.CONFIG_CHECKS for f in mirrored):
        return mirrored
    try:
        import torch  # lazy: in the child, next to verl
        from megatron.core.package_info import __version__ as mc_version
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from megatron.core.transformer.transformer_config import TransformerConfig
    except Exception:  # not installed (it is no verl dependency), or broken here
        return mirrored
    for role in engines:
        z = mcore.sizes(get, role)
        otc = {k: v for k in TC_KEYS if (v := get(z.otc + k)) is not None}
        kw = dict(
            num_layers=m.num_layers,
            hidden_size=model["hidden_size"],
            num_attention_heads=m.num_heads,
            num_query_groups=m.num_kv_heads,
            num_moe_experts=m.num_experts or None,
            add_bias_linear=False,  # Qwen3's and DeepSeek's (MoE bias needs etp 1)
            tensor_model_parallel_size=z.tp,
            pipeline_model_parallel_size=z.pp,
            virtual_pipeline_model_parallel_size=z.vpp,
            context_parallel_size=z.cp,
            expert_model_parallel_size=z.ep,
            expert_tensor_parallel_size=z.etp,
            # McoreEngineConfig turns it off at tp=1 (verl@0.9.1:verl/workers/config/engine.py)
            sequence_parallel=bool(get(z.keys["tensor"].rsplit(".", 1)[0] + ".sequence_parallel"))
            and z.tp > 1,
            params_dtype=torch.bfloat16,
            pipeline_dtype=torch.bfloat16,  # the bridge sets it from the engine's dtype
            bf16=True,
        )
        kw.update(otc)  # verl applies override_transformer_config over its own keys
        keys = tuple(z.keys.values()) + tuple(z.otc + k for k in otc)
        try:
            with quiet():
                cfg = TransformerConfig(**kw)
                for rank in range(z.pp):  # each stage builds its layers (vp stage 0 of each)
                    get_num_layers_to_build(cfg, vp_stage=0, pp_rank=rank)
        except Exception as e:
            said = [
                f for f in mirrored if f.check in mcore.CONFIG_CHECKS and f"({role})" in f.message
            ]
            fail(
                "megatron",
                "megatron_core",
                f"{text(e)} ({role})",
                said[0].keys if said else keys,
                f"megatron_core@{mc_version}:megatron/core/transformer/transformer_config.py:"
                "TransformerConfig.__post_init__, transformer_block.py:get_num_layers_to_build",
            )
    return [f for f in mirrored if f.check not in mcore.CONFIG_CHECKS]
