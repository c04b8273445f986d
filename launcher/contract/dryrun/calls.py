"""What the dry run's child (verl_side.py, mcore_side.py) needs around each call it makes into verl
or megatron-core: their prints kept off the answer pipe, an exception as one line."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator


def text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """verl prints progress and warns (deprecations): the answers stay alone on stdout."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
