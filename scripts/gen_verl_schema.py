"""Regenerate launcher/facts/verl_schema/verl-<version>.json from the real verl releases.

    python scripts/gen_verl_schema.py            # writes one file per version
    python scripts/gen_verl_schema.py --check    # exit 1 when a file differs (the slow tests run it)

Each release's wheel is downloaded with `pip download --no-deps` into ~/.cache/topl-verl (never
installed) and its `verl/trainer/config` composed with Hydra's compose API, as verl's own
main_ppo does. Recorded per key: type and default (interpolations kept as written), plus the
free-form containers (an empty mapping, or a `dict[...]` field of the dataclass a `_target_`
names: verl passes what is put under them on, so a new key below them needs `+`).

The DAPO trainer config is verl-recipe's, not verl's: verl pins verl-recipe as its `recipe`
submodule (e7f88957 at v0.8.0 and v0.9.0). The recipe's overlay is recorded as data (`configs`)
so the tests compose it on top of the same verl without GitHub access.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from topl.launcher.contract.dryrun.releases import release_root

OUT = Path(__file__).resolve().parents[1] / "launcher" / "facts" / "verl_schema"
VERSIONS = ("0.8.0", "0.9.0", "0.9.1")
# verl-project/verl@v0.8.0 and @v0.9.0: `recipe` gitlink (git ls-tree <tag> recipe); the overlay
# below is that commit's dapo/config/dapo_megatron_trainer.yaml, unchanged up to verl-recipe@48ea0a7.
# The mirror read holds no v0.9.1 tag; release/v0.9.0 still pins e7f88957.
RECIPE_AT = "verl-project/verl-recipe@e7f889574b8301cc0f0fc1d57c6d67f31ffeb689"
DAPO_OVERLAY = {
    "data": {"gen_batch_size": "${data.train_batch_size}"},
    "reward": {
        "reward_manager": {"name": "dapo"},
        "reward_kwargs": {
            "overlong_buffer_cfg": {"enable": False, "len": 0, "penalty_factor": 0.0, "log": False},
            "max_resp_len": None,
        },
    },
    "algorithm": {
        "filter_groups": {
            "_target_": "verl.trainer.config.FilterGroupsConfig",
            "enable": False,
            "metric": None,
            "max_num_gen_batches": 0,
        }
    },
    "trainer": {"project_name": "verl-dapo"},
}
# Mappings verl hands on whole (not a dataclass): (key, file, the needle that shows it), checked in
# each release before it is recorded.
PASS_THROUGH = (("ray_kwargs.ray_init", "verl/trainer/main_ppo.py", 'ray_kwargs.get("ray_init"'),)
CONFIGS = {
    "dapo_megatron_trainer": {
        "defaults": ["ppo_megatron_trainer", "_self_"],
        "overlay": DAPO_OVERLAY,
        "source": f"{RECIPE_AT}:dapo/config/dapo_megatron_trainer.yaml",
    }
}


def dict_fields(root: Path) -> dict[str, tuple[str, set[str]]]:
    """Dataclass name -> (file, fields annotated as a dict): the free-form containers."""
    out: dict[str, tuple[str, set[str]]] = {}
    for sub in ("workers/config", "trainer/config"):
        for py in sorted((root / "verl" / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(py.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                names = {
                    st.target.id
                    for st in node.body
                    if isinstance(st, ast.AnnAssign)
                    and isinstance(st.target, ast.Name)
                    and ast.unparse(st.annotation).removeprefix("Optional[").startswith("dict")
                }
                if names:
                    out[node.name] = (str(py.relative_to(root)), names)
    return out


def _type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, str) and v.startswith("${"):
        return "interp"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(v), "any")


def walk(node, prefix, keys, free, fields, version, why):
    if not isinstance(node, dict):
        keys[prefix] = [_type(node), node if not isinstance(node, list) else list(node)]
        return
    if not node and prefix:
        free[prefix] = f"verl@{version}:verl/trainer/config (an empty mapping)"
    cls = str(node.get("_target_", "")).rsplit(".", 1)[-1]
    for k, v in node.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if cls in fields and k in fields[cls][1] and isinstance(v, dict):
            free[key] = f"verl@{version}:{fields[cls][0]}:{cls}.{k} (a dict field)"
        walk(v, key, keys, free, fields, version, why)


def compose_all(root: Path, names) -> list[dict]:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(
            config_dir=str(root / "verl" / "trainer" / "config"), version_base=None
        ):
            return [
                OmegaConf.to_container(compose(n, overrides=o), resolve=False) for n, o in names
            ]
    finally:
        GlobalHydra.instance().clear()


def collect(version: str) -> dict:
    root = release_root(version)
    fields = dict_fields(root)
    keys: dict = {}
    free: dict = {}
    engines = [("ppo_trainer", ["model_engine=dp"]), ("ppo_trainer", ["model_engine=megatron"])]
    for tree in compose_all(root, engines):
        walk(tree, "", keys, free, fields, version, "")
    for key, path, needle in PASS_THROUGH:
        if needle in (root / path).read_text():
            free[key] = f"verl@{version}:{path}:{needle} (passed to ray.init whole)"
    dapo_keys: dict = {}
    for tree in compose_all(root, [("ppo_megatron_trainer", [])]):
        walk(tree, "", dapo_keys, {}, fields, version, "")
    overlay: dict = {}
    walk(DAPO_OVERLAY, "", overlay, {}, fields, version, "")
    extra = {k: v for k, v in {**dapo_keys, **overlay}.items() if k not in keys}
    return {
        "version": version,
        "source": f"verl@{version}:verl/trainer/config/ppo_trainer.yaml "
        "(composed with model_engine=dp and =megatron)",
        "keys": dict(sorted(keys.items())),
        "free_form": dict(sorted(free.items())),
        "configs": {
            "ppo_trainer": {"source": f"verl@{version}:verl/trainer/config/ppo_trainer.yaml"},
            **{name: {**c, "keys": dict(sorted(extra.items()))} for name, c in CONFIGS.items()},
        },
    }


def text(data: dict) -> str:
    return json.dumps(data, indent=0, sort_keys=False) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for v in VERSIONS:
        data = collect(v)
        path = OUT / f"verl-{v}.json"
        if "--check" in sys.argv:
            if not path.is_file() or path.read_text() != text(data):
                stale.append(str(path))
            continue
        path.write_text(text(data))
        print(f"wrote {path}: {len(data['keys'])} keys, {len(data['free_form'])} free-form")
    if stale:
        print("differs from the real verl: " + ", ".join(stale))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
