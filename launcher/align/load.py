"""Imported through VERL_USE_EXTERNAL_MODULES (the renderer adds it for strict runs on the stock
stacks): applies topl's alignments at `import verl` in every verl process, or raises AlignError
there (verl propagates it: verl@0.9.1:verl/__init__.py, import_external_libs) without having
patched anything."""

from topl.launcher.align.patches import apply

PATCHED = apply()
