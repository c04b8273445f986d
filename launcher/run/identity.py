"""topl's run identity (run directory, spec hash, recipe, stack profile, sweep point) for the
trackers verl logs to, through verl's own keys and each tracker's own environment variables;
never a value the user set, never a secret.

verl builds its one `Tracking` from trainer.project_name, trainer.experiment_name,
trainer.logger and the whole resolved config (verl@0.9.1:verl/trainer/ppo/ray_trainer.py:
RayPPOTrainer.fit, verl/trainer/ppo/v1/trainer_base.py), and passes each logger what it takes
(verl@0.9.1:verl/utils/tracking.py:Tracking.__init__):
- every logger: trainer.experiment_name, which topl makes unique per run (below) unless the user
  typed `experiment=` or set trainer.experiment_name: TensorBoard writes to
  `tensorboard_log/{project}/{experiment}` (_TensorboardAdapter, unless TENSORBOARD_DIR is set),
  so the points of a sweep no longer share one event folder; W&B's run name, MLflow's run name;
- W&B: wandb.init reads WANDB_TAGS (comma-separated), WANDB_NOTES and WANDB_RUN_GROUP where
  init's arguments leave them unset, and verl passes none of them
  (wandb@0.31.0:wandb/sdk/wandb_settings.py:Settings.update_from_env_vars, wandb/env.py);
- MLflow: tags from MLFLOW_RUN_CONTEXT, a JSON object, for every run started without a run id
  (mlflow-skinny@3.17.2:mlflow/tracking/context/system_environment_context.py:
  SystemEnvironmentContext.tags, registered in mlflow/tracking/context/registry.py and resolved by
  mlflow/tracking/fluent.py:start_run); verl logs the whole config as params, and the variables
  above are in it (ray_kwargs.ray_init.runtime_env.env_vars, launcher/render/env.py:argv_env).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topl.launcher.base import redact
from topl.launcher.base.tree import flatten

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed
    from topl.launcher.spec.job import JobSpec

TRACKER_VARS = ("WANDB_TAGS", "WANDB_NOTES", "WANDB_RUN_GROUP", "MLFLOW_RUN_CONTEXT")


def of(
    composed: Composed, run_dir: Path, spec_text: str, point: list[str] | None
) -> dict[str, Any]:
    """The run's identity: what a tracker shows to find the run directory again."""
    sweep = run_dir.parent.name if point is not None else None
    return {
        "run_dir": str(run_dir),
        "spec_sha256": hashlib.sha256(spec_text.encode()).hexdigest(),
        "recipe": Path(composed.recipe).stem if composed.recipe else None,
        "stack": composed.choices.get("stack"),
        "sweep": sweep,
        "point": redact.text(" ".join(point)) if point is not None else None,
    }


def user_named(composed: Composed) -> bool:
    """The experiment's name was typed (`experiment=` on the command line, or verl's
    trainer.experiment_name in verl_overrides): topl leaves it as it is."""
    typed = composed.source("experiment").startswith("command line")
    overrides = flatten(composed.to_object().verl_overrides)
    return typed or any(k.lstrip("+") == "trainer.experiment_name" for k in overrides)


def stamp(spec: JobSpec, composed: Composed, ident: dict[str, Any]) -> JobSpec:
    """The spec verl gets: the experiment named after the run, and the trackers' identity
    variables in cluster.env where neither cluster.env nor this environment has them."""
    run = Path(ident["run_dir"])
    run_id = f"{run.parent.name}-{run.name}" if ident["sweep"] else run.name
    experiment = spec.experiment
    if not user_named(composed):
        experiment = run_id if spec.experiment in run_id else f"{spec.experiment}-{run_id}"
    tags = ["topl", f"stack={ident['stack']}", f"spec={ident['spec_sha256'][:12]}"]
    if ident["recipe"]:
        tags.append(f"recipe={ident['recipe']}"[:64])  # W&B's longest tag
    notes = f"topl run {ident['run_dir']}" + (
        f"; point: {ident['point']}" if ident["point"] else ""
    )
    context = {f"topl.{k}": v for k, v in ident.items() if v is not None}
    wanted = {
        "WANDB_TAGS": ",".join(t.replace(",", ";") for t in tags),
        "WANDB_NOTES": notes,
        "MLFLOW_RUN_CONTEXT": json.dumps(context, sort_keys=True),
    }
    if ident["sweep"]:
        wanted["WANDB_RUN_GROUP"] = f"{spec.experiment}-{ident['sweep']}"
    env = dict(spec.cluster.env)
    for k, v in wanted.items():
        if k not in env and k not in os.environ:
            env[k] = v
    cluster = dataclasses.replace(spec.cluster, env=env)
    return dataclasses.replace(spec, experiment=experiment, cluster=cluster)
