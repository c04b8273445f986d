"""Strict mode: every requirement for bitwise-equal log-probs (facts §2-§5), one module per rule
family (contract/strict_*.py). Imported in this order, the rules register in the order they always
had (`topl rules` lists them so)."""

# isort: off
from topl.launcher.contract import strict_alignment  # noqa: F401  (registers TOP-ALN-*)
from topl.launcher.contract import strict_attention  # noqa: F401  (TOP-ATTN-*, TOP-GRAPH-001)
from topl.launcher.contract import strict_scheduling  # noqa: F401  (TOP-CACHE-*)
from topl.launcher.contract import strict_parallel  # noqa: F401  (TOP-COLL-*, TOP-TP-*)
from topl.launcher.contract import strict_logprobs  # noqa: F401  (TOP-LOGP-*)
# isort: on
