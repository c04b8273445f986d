"""A Hydra sweeper that validates every point with topl's contract and drops invalid ones.

Expansion is Hydra's own (BasicSweeper's cartesian product); valid points go to whatever launcher
is configured (basic, joblib, ray, submitit); invalid points never start.
"""
# no `from __future__ import annotations`: Hydra imports plugins outside sys.modules (dataclass needs it)

import contextlib
import csv
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import OmegaConf

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.plan.sweep import Planner, iter_expand, iter_items
from topl.launcher.run import watch_io

log = logging.getLogger(__name__)


@dataclass
class ToplSweeperConf:
    _target_: str = "hydra_plugins.topl_sweeper.topl_sweeper.ToplSweeper"
    max_batch_size: Optional[int] = None  # jobs handed to the launcher at once (None: all)
    params: Optional[Dict[str, str]] = None  # sweep parameters from config, as in BasicSweeper
    on_invalid: str = "skip"  # skip: drop invalid points and run the rest | fail: run nothing
    # `recipe=NAME` as the user wrote it: `topl launch` hands Hydra a temporary copy of the recipe
    # (set by `topl launch`; the sweeper validates points against the user's spelling)
    recipe: Optional[str] = None


# The plugin registers its own config, as Hydra's sweepers do (discovery imports this module).
ConfigStore.instance().store(
    group="hydra/sweeper", name="topl", node=ToplSweeperConf, provider="topl"
)


CSV_COLUMNS = [
    "point",
    "overrides",
    "valid",
    "rules",
    "warnings",
    "train_gb",
    "rollout_gb",
    "devices",
]


class ReportWriter:
    """sweep_report.json and .csv written point by point (a sweep's verdicts are never all held
    in memory) under hidden names; `close` ends the JSON with the counts and renames both into
    place: a disk that fills leaves no half report, only the error."""

    def __init__(self, sweep_dir: Path):
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self._paths = [sweep_dir / "sweep_report.json", sweep_dir / "sweep_report.csv"]
        self._tmp = [p.with_name(f".{p.name}.tmp") for p in self._paths]
        self._json = self._tmp[0].open("w")
        self._csv_file = self._tmp[1].open("w", newline="")
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(CSV_COLUMNS)
        self._json.write('{\n "verdicts": [')
        self.points = self.valid = 0

    def add(self, v) -> None:
        r = redact.current().obj(v.to_dict())  # a secret typed in a sweep stays out of the files
        sep = "\n  " if not self.points else ",\n  "
        self._json.write(sep + json.dumps(r, default=str))
        self._csv.writerow(
            [
                self.points,
                " ".join(r["overrides"]),
                r["valid"],
                " ".join(r["rules"]),
                " ".join(r["warnings"]),
                r["train_gb"],
                r["rollout_gb"],
                r["devices"],
            ]
        )
        self.points, self.valid = self.points + 1, self.valid + r["valid"]

    def close(self) -> None:
        try:
            self._json.write(f'\n ],\n "points": {self.points},\n "valid": {self.valid}\n}}\n')
            self._json.close()
            self._csv_file.close()
            for tmp, path in zip(self._tmp, self._paths):
                os.replace(tmp, path)
        except OSError:  # ENOSPC, quota: the error is the message; no half report stays
            for f in (self._json, self._csv_file):
                with contextlib.suppress(OSError):
                    f.close()
            for tmp in self._tmp:
                tmp.unlink(missing_ok=True)
            raise


def write_reports(sweep_dir: Path, verdicts) -> None:
    w = ReportWriter(sweep_dir)
    for v in verdicts:
        w.add(v)
    w.close()


class ToplSweeper(BasicSweeper):
    def __init__(
        self,
        max_batch_size: Optional[int] = None,
        params: Optional[Dict[str, str]] = None,
        on_invalid: str = "skip",
        recipe: Optional[str] = None,
    ):
        super().__init__(max_batch_size=max_batch_size, params=params)
        if on_invalid not in ("skip", "fail"):
            raise HydraException(f"hydra.sweeper.on_invalid={on_invalid!r}: use skip or fail")
        self.on_invalid = on_invalid
        self.recipe = recipe

    def _as_user_wrote(self, override: str) -> str:
        key, sep, _ = override.partition("=")
        if sep and self.recipe and key.lstrip("+") == "recipe":
            return f"{key}={self.recipe}"
        return override

    def sweep(self, arguments: List[str]) -> Any:

        params = self._parse_config()
        planner, valid = Planner(), []
        sweep_dir = Path(self.config.hydra.sweep.dir)
        report = ReportWriter(sweep_dir)
        try:
            # a sweep too large (or badly written) is refused here, before a point: one message
            to_launch = iter_expand(params + list(arguments))
            items = iter_items(params + [self._as_user_wrote(a) for a in arguments])
            # one point at a time: only the valid points' overrides are kept (the launcher's input)
            for launch_ov, p in itertools.zip_longest(to_launch, items):
                if launch_ov is None or p is None:
                    raise HydraException("topl sweeper: sweep expansion mismatch")
                v = planner.verdict(list(p))
                if v.valid:  # run directories take the report's point numbers
                    valid.append((report.points, launch_ov))
                else:
                    log.warning(
                        "topl sweeper: dropped point %d (%s): %s",
                        report.points,
                        " ".join(v.overrides),
                        ", ".join(v.rules),
                    )
                report.add(v)
        except ToplError as e:
            log.error(e.render())
            raise SystemExit(2) from None  # a readable message, not a traceback
        finally:
            report.close()
        # as BasicSweeper.sweep does, secrets out (the overrides and cluster.env hold them)
        text = redact.text(OmegaConf.to_yaml(self.config))
        watch_io.replace_file(sweep_dir / "multirun.yaml", text.encode())  # whole, or not at all
        n = report.points
        log.info("topl sweeper: %d points, %d valid; report in %s", n, len(valid), sweep_dir)
        if len(valid) < n and self.on_invalid == "fail":
            log.error(
                "topl sweeper: %d invalid point(s) and on_invalid=fail; nothing started (see %s)",
                n - len(valid),
                sweep_dir / "sweep_report.csv",
            )
            raise SystemExit(2)
        if not valid:
            log.warning("topl sweeper: no valid point; nothing started")
            return []
        returns = []
        for first, batch in batches(valid, self.max_batch_size or len(valid)):
            results = self.launcher.launch(batch, initial_job_idx=first)
            for r in results:
                _ = r.return_value
            returns.append(results)
        return returns


def batches(points, size: int):
    """(first point number, overrides) per batch: consecutive point numbers, at most `size`, so
    Hydra's job numbers (the run directories) are the report's point numbers, dropped ones skipped."""
    out: list = []
    for i, ov in points:
        if out and (len(out[-1][1]) >= size or out[-1][0] + len(out[-1][1]) != i):
            out.append((i, [ov]))
        elif out:
            out[-1][1].append(ov)
        else:
            out.append((i, [ov]))
    return out
