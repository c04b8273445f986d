"""The replacements every model runs through, dense or MoE: the dense MLP's SwiGLU, vLLM's
log-probs and row-parallel linear, verl's compute_logits hook (the MoE ones: `patches`). Each
takes the original and returns the new callable; `patches.apply` installs them.
"""

from __future__ import annotations

from typing import Any

from topl.launcher.align import ops


def _silu_mul(original: Any) -> Any:
    """0.20.2rc1-0.23.0.post1: the release's forward_oot prefetches the down-projection weight
    around npu_swiglu (vllm_ascend.utils.get_weight_prefetch_method); kept, SwiGLU replaced."""

    def forward_oot(self, x):
        from vllm_ascend.utils import get_weight_prefetch_method

        prefetch = get_weight_prefetch_method()
        prefetch.maybe_prefetch_mlp_weight_preprocess(prefetch.MLP_DOWN, x)
        out = ops.silu_mul(x)
        prefetch.maybe_prefetch_mlp_weight_postprocess(out)
        return out

    return forward_oot


def _silu_mul_no_prefetch(original: Any) -> Any:
    """0.24.0rc1 on: forward_oot is npu_swiglu alone, and vllm_ascend.utils has no
    get_weight_prefetch_method any more (fact silu_weight_prefetch): nothing to keep around it."""

    def forward_oot(self, x):
        return ops.silu_mul(x)

    return forward_oot


def _logits_vocab(original: Any) -> Any:
    """verl's monkey_patch_compute_logits sets logits[..., len(tokenizer):] to -inf; Megatron's
    log-prob sums over every row of the output layer, so the rollout's must too. The vision
    placeholders verl also bans (multimodal models only) stay banned: sampling one takes the
    job down (verl@0.9.1:verl/workers/rollout/utils.py:get_vision_placeholder_token_ids)."""

    def monkey_patch_compute_logits(model, vocab_size, banned_token_ids=None):
        if not banned_token_ids:
            return  # vLLM's compute_logits as it is
        from types import MethodType

        import torch

        inner = model.compute_logits
        banned = torch.tensor(banned_token_ids, dtype=torch.long)

        def compute_logits(self, *args, **kwargs):
            nonlocal banned
            logits = inner(*args, **kwargs)
            if banned.device != logits.device:
                banned = banned.to(logits.device)
            return logits.index_fill_(-1, banned, float("-inf"))

        model.compute_logits = MethodType(compute_logits, model)

    return monkey_patch_compute_logits


def _logprobs(original: Any) -> Any:
    def compute_logprobs(logits):
        return ops.log_softmax(logits)

    return compute_logprobs


def _row_parallel(original: Any) -> Any:
    def forward(self, input_):
        from vllm.distributed import (
            split_tensor_along_last_dim,
            tensor_model_parallel_all_gather,
            tensor_model_parallel_reduce_scatter,
        )

        if self.input_is_parallel:
            x = input_
        else:
            x = split_tensor_along_last_dim(input_, num_partitions=self.tp_size)[
                self.tp_rank
            ].contiguous()
        bias = None if self.tp_rank > 0 or self.skip_bias_add else self.bias
        partial = self.quant_method.apply(self, x, bias)
        if self.reduce_results and self.tp_size > 1:
            out = ops.row_parallel_reduce(
                partial,
                self.tp_size,
                lambda t: tensor_model_parallel_reduce_scatter(t, dim=0),
                lambda t: tensor_model_parallel_all_gather(t, dim=0),
            )
        else:
            out = partial
        if not self.return_bias:
            return out
        return out, (self.bias if self.skip_bias_add else None)

    return forward


REPLACEMENTS = {
    "silu_mul": _silu_mul,
    "silu_mul_no_prefetch": _silu_mul_no_prefetch,
    "logprobs": _logprobs,
    "row_parallel": _row_parallel,
    "logits_vocab": _logits_vocab,
}
