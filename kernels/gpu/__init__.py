"""Triton versions of the aligned kernels (GPU; the same language runs on Ascend via triton-ascend).

Importing this package needs Triton; callers check `available()` first.
"""


def available() -> bool:
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()
