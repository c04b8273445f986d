"""Regenerate launcher/contract/verl_keys.json from the installed verl's own Hydra config.

    python scripts/gen_verl_keys.py            # writes the file
    python scripts/gen_verl_keys.py --check    # exit 1 when the file differs (tests run this)

verl is found with importlib.util.find_spec, never imported (its import needs torch and ray).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "launcher" / "contract" / "verl_keys.json"


def collect() -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")
    conf = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    version = importlib.metadata.version("verl")
    keys, free = set(), set()

    def walk(node, prefix):
        if isinstance(node, dict):
            if not node and prefix:
                free.add(prefix)  # an empty mapping: verl passes whatever is put under it
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            keys.add(prefix)

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base=None):
            for engine in ("dp", "megatron"):
                cfg = compose("ppo_trainer", overrides=[f"model_engine={engine}"])
                walk(OmegaConf.to_container(cfg, resolve=False), "")
    finally:
        GlobalHydra.instance().clear()
    return {
        "source": f"verl@{version}:verl/trainer/config/ppo_trainer.yaml "
        "(composed with model_engine=dp and =megatron)",
        "version": version,
        "keys": sorted(keys),
        "free_form": sorted(free),
    }


def main() -> int:
    data = collect()
    text = json.dumps(data, indent=0) + "\n"
    if "--check" in sys.argv:
        same = OUT.read_text() == text
        print("up to date" if same else f"{OUT} differs from verl {data['version']}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}: {len(data['keys'])} keys, {len(data['free_form'])} free-form containers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
