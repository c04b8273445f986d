"""TOP-RES-010: a node runs no more devices than its cluster group's hardware holds
(cluster.max_devices_per_node, cited in conf/cluster/*.yaml). Fewer are fine; a group that does not
state it (local, a cluster file of your own) is not checked; the refusal names the layout of the
same devices on more nodes, which passes. (`plan` and `check --fix`: tests/plan; the importer's
groups: tests/importer/test_import_cluster.py.)"""

import pytest
import yaml
from helpers import STRICT_A3

from topl.launcher.compose.sources import conf_dir
from topl.launcher.contract import check
from topl.launcher.spec.job import whole_nodes

RULE = "TOP-RES-010"


def ids(compose, overrides):
    return {v.rule for v in check(compose(overrides))}


def test_every_npu_group_states_what_its_node_holds_and_uses_no_more():
    groups = {
        f.stem: yaml.safe_load(f.read_text()) for f in (conf_dir() / "cluster").glob("*.yaml")
    }
    holds = {name: g.get("max_devices_per_node") for name, g in groups.items()}
    # Atlas 800T A2: 8 NPUs; Atlas 800T A3: 16 devices (8 NPUs of 2 dies), the sources in the files
    assert holds == {"atlas_a2": 8, "atlas_a3": 16, "slurm_a3": 16, "local": None}
    for name, g in groups.items():
        assert holds[name] is None or g["devices_per_node"] <= holds[name], name


@pytest.mark.parametrize(
    "cluster, per, holds, layout",
    [("atlas_a3", 32, 16, (2, 16)), ("atlas_a2", 16, 8, (2, 8)), ("atlas_a3", 24, 16, (2, 12))],
)
def test_more_than_a_node_holds_is_refused_with_a_layout_that_passes(
    compose, cluster, per, holds, layout
):
    base = [*STRICT_A3, f"cluster={cluster}"]
    v = next(
        v for v in check(compose([*base, f"cluster.devices_per_node={per}"])) if v.rule == RULE
    )
    assert v.severity == "error"
    assert v.keys["cluster.devices_per_node"] == {
        "value": per,
        "source": f"command line `cluster.devices_per_node={per}`",
    }
    assert v.keys["cluster.max_devices_per_node"] == {
        "value": holds,
        "source": f"conf/cluster/{cluster}.yaml",
    }
    assert set(v.keys) == {"cluster.devices_per_node", "cluster.max_devices_per_node"}
    fix = f"cluster.nodes={layout[0]} cluster.devices_per_node={layout[1]}"
    assert fix in v.message and f"holds {holds} devices" in v.message, v.message
    assert RULE not in ids(compose, [*base, *fix.split()])


def test_fewer_than_a_node_holds_and_an_unstated_count_pass(compose):
    assert RULE not in ids(compose, [*STRICT_A3, "cluster=atlas_a2", "cluster.devices_per_node=4"])
    unstated = [*STRICT_A3, "cluster.devices_per_node=32", "cluster.max_devices_per_node=null"]
    assert RULE not in ids(compose, unstated)
    assert compose([]).to_object().cluster.max_devices_per_node is None  # local: the machine's


def test_the_layout_is_the_fewest_nodes_of_equal_size():
    assert whole_nodes(32, 16) == (2, 16)
    assert whole_nodes(24, 16) == (2, 12)
    assert whole_nodes(8, 16) == (1, 8)
    assert whole_nodes(17, 16) == (17, 1)  # a prime count: one device per node
    assert whole_nodes(96, 8) == (12, 8)
