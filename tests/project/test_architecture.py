"""Package-level structure: one-way dependencies, the one flag parser, the installed plugin."""

import pytest
from paths import ROOT

from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import parse


def test_kernels_import_nothing_from_the_launcher():
    hits = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "kernels").rglob("*.py")
        if "topl.launcher" in p.read_text()
    ]
    assert not hits, hits


def test_spec_does_not_import_the_sweeper_plugin():
    assert "hydra_plugins" not in (ROOT / "launcher" / "spec" / "job.py").read_text()


def test_hydra_discovers_the_sweeper_plugin_and_its_config_in_the_installed_package():
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    names = [p.__name__ for p in Plugins.instance().discover(Sweeper)]
    assert "ToplSweeper" in names
    assert "topl.yaml" in ConfigStore.instance().list("hydra/sweeper")  # registered by the plugin


def test_flags_come_out_and_the_rest_stays_in_order():
    flags, rest = parse(
        ["a=1", "--json", "b=2", "--prompts", "4"],
        flags=("--json",),
        options={"--prompts": "16", "--dump": ""},
    )
    assert (flags.json, flags.prompts, flags.dump) == (True, "4", "")
    assert rest == ["a=1", "b=2"]


def test_an_optional_value_never_swallows_an_override():
    flags, rest = parse(["--ray", "cluster.nodes=2"], optional=("--ray",))
    assert flags.ray == "" and rest == ["cluster.nodes=2"]
    flags, rest = parse(["--ray", "http://head:8265"], optional=("--ray",))
    assert flags.ray == "http://head:8265" and rest == []
    flags, _ = parse([], optional=("--ray",))
    assert flags.ray is None


def test_an_option_without_its_value_is_a_readable_error():
    with pytest.raises(ToplError, match="--plots needs a value"):
        parse(["--plots"], options={"--plots": None})
