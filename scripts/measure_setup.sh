#!/usr/bin/env bash
# Times the README's set-up lines in a fresh venv (the numbers the README quotes):
#   bash scripts/measure_setup.sh [WORKDIR]      (default /tmp/topl-measure; removed first)
# Set TORCH_INDEX=https://download.pytorch.org/whl/cpu where no local CPU torch wheel exists.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/topl-measure}"
rm -rf "$work" && mkdir -p "$work"
git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$work") 2>/dev/null \
  || cp -r "$src"/{conf,kernels,launcher,recipes,pyproject.toml,README.md} "$work"
cd "$work"
t() { local s=$SECONDS; "$@" > /dev/null 2>&1; echo "$(( SECONDS - s )) s: $*"; }
python3 -m venv core && t core/bin/pip install -q . && echo "core venv: $(du -sh core | cut -f1)"
python3 -m venv .venv
t .venv/bin/pip install -q torch==2.13.0 ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
t .venv/bin/pip install -q ".[local]"
echo "local venv: $(du -sh .venv | cut -f1)"
t .venv/bin/topl launch run_root="$work/runs"
