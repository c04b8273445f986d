"""Group YAMLs in conf/ carry only what differs from the spec's defaults (the spec documents them)."""

import dataclasses
import typing

import yaml
from paths import ROOT

from topl.launcher.spec.job import JobSpec

CONF = ROOT / "conf"


def restated_defaults(schema, data: dict, prefix: str = "") -> list[str]:
    """Keys of `data` whose value equals the schema's default (same type, same value)."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    out = []
    for key, value in data.items():
        if key not in fields:
            continue
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            out += restated_defaults(hints[key], value, f"{prefix}{key}.")
            continue
        f = fields[key]
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (
                f.default_factory()
                if f.default_factory is not dataclasses.MISSING
                else dataclasses.MISSING
            )
        )
        if default is not dataclasses.MISSING and type(default) is type(value) and default == value:
            out.append(f"{prefix}{key}")
    return out


def group_files():
    hints = typing.get_type_hints(JobSpec)
    for path in sorted(CONF.glob("*/*.yaml")):
        if path.parent.name in hints:
            yield path, hints[path.parent.name]


def test_group_files_restate_no_spec_default():
    found = {}
    for path, schema in group_files():
        keys = restated_defaults(schema, yaml.safe_load(path.read_text()) or {})
        if keys:
            found[str(path.relative_to(CONF))] = keys
    assert not found, f"drop these (the spec default already says it): {found}"


def test_the_check_sees_a_restated_default():
    from topl.launcher.spec.job import TrainSpec

    assert restated_defaults(TrainSpec, {"tp": 1, "pp": 2}) == ["tp"]
    assert restated_defaults(TrainSpec, {"tp": 1.0}) == []  # a different type is a different value
