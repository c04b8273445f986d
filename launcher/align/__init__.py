"""topl's alignment module for every vllm-ascend release from 0.20.2rc1 to 0.30.0rc2 (the stock
stacks: 0.23.0.post1 = stack=release, 0.30.0rc2 = stack=prerelease): runtime patches that make
vLLM-Ascend's rollout compute what Megatron computes in training, where the seed's module (which
git-applies a 0.18.0 patch) cannot be used. Nothing here edits a source tree.

- `targets`: what is aligned and where, per group of vllm-ascend releases (data; no torch: the
  contract and the facts read it).
- `ops`: the plain-torch maths of each alignment (CPU-testable against megatron-core).
- `patches`: the replacements, resolved and installed all-or-nothing (the MoE ones; `dense`:
  those every model runs through).
- `load`: the module the renderer names in VERL_USE_EXTERNAL_MODULES; importing it applies
  the patches (verl@0.9.1:verl/__init__.py imports each such module at `import verl`).

Importing this package itself patches nothing.
"""
