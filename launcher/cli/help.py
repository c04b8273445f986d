"""`topl COMMAND --help` and `topl --version`: the flags, the override grammar and examples of
each command, printed before anything is composed (Hydra would read `--help` as an override)."""

from __future__ import annotations

from topl.launcher import __version__

OVERRIDES = """overrides (Hydra's grammar, https://hydra.cc/docs/advanced/override_grammar/basic/):
  key=value          set a field                        train.tp=2  rollout.temperature=0.7
  group=option       pick a config group option         model=qwen3_4b  cluster=atlas_a3
  recipe=NAME|PATH   start from a recipe                 recipe=qwen3_30b_a3b_grpo_a3_strict
  +key=value         add a key the config lacks          +cluster.env.HCCL_BUFFSIZE=200
  ~key               delete a key
  key=a,b  key=range(1,9)   a sweep (`topl plan`, `topl launch -m`)
  quote values with spaces or commas: 'key="a b"'"""

HELP = {
    "launch": (
        "topl launch [OVERRIDES] [--dry-run] [--follow] [--watch] [--skip-doctor] [--skip-deep] "
        "[--unsafe-hydra-overrides] [HYDRA FLAGS]\n       topl launch --resume RUN_DIR "
        "[--follow] [--watch] [--skip-doctor]",
        "Validate the spec, write a new run directory, start the backend (local reference "
        "engines, subprocess, or a Ray job).",
        """  --dry-run        write the run directory and print the command; start nothing
  --follow         ray_job: stream the job's logs until it ends
  --watch          follow logdiff / reward live; strict: stop the job on the first logdiff != 0
  --skip-doctor    remote backends run `topl doctor` first; this skips it, loudly
  --skip-deep      remote backends dry-run the declared verl's start-up checks first (where
                   that verl is installed or cached: docs/startup.md); this skips it, loudly
  --unsafe-hydra-overrides  allow hydra.callbacks / logging / config-dir overrides (they run code)
  --resume RUN_DIR an interrupted or failed run again, in its own directory, from its own config
                   (.hydra/config.yaml, checked again): same experiment name and tracker tags, verl
                   told trainer.resume_mode=auto (its latest checkpoint); the attempt before moves
                   to RUN_DIR/attempts/N/. Not the reference engines (local, or slurm.run=embedded:
                   no checkpoints)
  -m, --multirun   sweep: every point validated by topl's sweeper, invalid ones dropped;
                   one line per point, then a table numbered as the run directories
  --cfg job        print the composed config (Hydra); --info, --hydra-help: Hydra's own
  a Ray cluster is a config value, not a flag: cluster.ray_address=http://HEAD:8265""",
        """  topl launch                                        # the embedded default, here
  topl launch recipe=qwen3_30b_a3b_grpo_a3_strict --dry-run
  topl launch recipe=qwen3_4b_grpo_a3_strict cluster.ray_address=http://HEAD:8265 --follow
  topl launch -m recipe=qwen3_30b_a3b_grpo_a3_strict train.pp=4,8 --dry-run
  topl launch --resume runs/20261203-120000-000000-qwen3_4b_grpo_strict""",
    ),
    "check": (
        "topl check [OVERRIDES] [--json] [-q|--quiet] [--fix[=warnings] [-o FILE.yaml [--force]]] "
        "[--deep]",
        "Run the consistency contract only; exit 0 when no error, 2 when rejected.",
        '  --json           {"ok", "violations"} (+ "fix" with --fix)\n'
        "  -q, --quiet      errors only: nothing when accepted\n"
        "  --fix            search the smallest override set the contract accepts (never the model,\n"
        "                   alignment, stack or experiment; your own values last) and print it\n"
        "  --fix=warnings   the same, clearing warnings too\n"
        "  -o FILE.yaml     with --fix: write the fixed spec as a recipe (your recipe, your overrides\n"
        "                   and the fix's), then say what `topl check recipe=FILE.yaml` says\n"
        "  --force          replace an existing FILE.yaml\n"
        "  --deep           also dry-run the declared verl's own start-up checks on CPU (a few\n"
        "                   seconds; fetches that verl's wheel with pip if needed): docs/startup.md",
        """  topl check recipe=qwen3_30b_a3b_grpo_a3_strict
  topl check recipe=qwen3_30b_a3b_grpo_a3_strict rollout.tp=2 --json
  topl check recipe=qwen3_30b_a3b_grpo_a3_strict stack=release --fix
  topl check recipe=qwen3_30b_a3b_grpo_a3_strict stack=release --fix -o fixed.yaml""",
    ),
    "render": (
        "topl render [OVERRIDES] [--json] [-q|--quiet]",
        "Print the verl command (env included) the spec becomes.",
        '  --json           {"entrypoint", "overrides", "env", "command"}\n'
        "  -q, --quiet      when rejected, its errors only (no warnings)",
        "  topl render recipe=qwen3_30b_a3b_grpo_a3_strict --json",
    ),
    "rules": (
        "topl rules [--json | --markdown | --constraints | --doctor]",
        "Print the rule catalog: the contract's rules and the run-time rules topl's guard "
        "checks; or the field constraints; or the doctor's checks.",
        "  --json           machine-readable\n  --markdown       the table in docs/reference.md\n"
        "  --constraints    the field constraints (markdown)\n"
        "  --doctor         the doctor's checks: id, what, when, fix (with --json / --markdown)",
        "  topl rules --json\n  topl rules --doctor",
    ),
    "recipes": (
        "topl recipes [--json] | topl recipes show NAME | topl recipes diff A B [--env N=V]\n"
        "       topl recipes import SCRIPT.sh [-o OUT.yaml] [--force] [--launch N] "
        "[--env NAME=VALUE]... [GROUP=OPTION]... [-- SCRIPT_ARGS...]",
        "List recipes (shipped and TOPL_RECIPE_PATH), show one resolved, or diff two (A or B may\n"
        "be a launch script). `import` reads a bash launch script as data (never runs it) and\n"
        "writes a recipe (0600) plus a report by line; the last line gives the round trip and the\n"
        "contract's verdict, and the exit code is 0 only when both pass.",
        "  --json           machine-readable\n"
        "  --env NAME=VALUE a variable the script reads from its environment (import, diff)\n"
        "  --launch N       which launch to import when the script has several trainers\n"
        "  --force          replace an existing OUT.yaml",
        """  topl recipes
  topl recipes show qwen3_30b_a3b_grpo_a3_strict
  topl recipes diff qwen3_4b_grpo_a3_strict qwen3_4b_grpo_a3_off
  topl recipes import run_grpo.sh -o my_grpo.yaml --env DEVICE=npu""",
    ),
    "plan": (
        "topl plan [OVERRIDES with sweeps] [--json] [--all] [--rank] [-q|--quiet]",
        "Expand a sweep, validate every point (contract + memory estimate), launch nothing.",
        "  --json           machine-readable\n  --all            list every point, not only "
        "the first ones\n"
        "  --rank           the accepted points, cheapest first, by a roofline estimate of one "
        "step (docs/rank.md)\n"
        "  -q, --quiet      the rejected points only: nothing when every point is valid",
        "  topl plan recipe=qwen3_30b_a3b_grpo_a3_strict train.tp=1,2,4 train.pp=4,8\n"
        "  topl plan recipe=qwen3_30b_a3b_grpo_a3_strict train.tp=1,2,4 train.pp=4,8 --rank",
    ),
    "doctor": (
        "topl doctor [OVERRIDES] [--verbose] [--json] [--ray [ADDRESS]] [--list]",
        "Check the installed stack (accelerator, torch/torch_npu, CANN, verl importable and the "
        "version the stack profile declares, vllm-ascend, env) here, or on every node of a Ray "
        "cluster. Prints a summary and what failed; --verbose every check.",
        "  --verbose        every check, passed ones included\n"
        "  --json           machine-readable (every check)\n"
        "  --ray [ADDRESS]  on every alive Ray node (default: cluster.ray_address)\n"
        "  --list           the checks the doctor knows (= topl rules --doctor)",
        """  topl doctor
  topl doctor recipe=qwen3_30b_a3b_grpo_a3_strict --verbose
  topl doctor recipe=qwen3_30b_a3b_grpo_a3_strict --ray http://HEAD:8265""",
    ),
    "probe": (
        "topl probe [OVERRIDES] [--json] [--prompts N] [--arrival staggered|burst|reversed] "
        "[--dump DIR]",
        "Run the reference rollout and training engines on generated prompts and compare "
        "their log-probs (needs the `local` extra: torch).",
        """  --json           machine-readable
  --prompts N      how many prompts (16)
  --arrival MODE   staggered | burst | reversed request arrival
  --dump DIR       write boundary dumps for `topl diagnose`""",
        """  topl probe
  topl probe alignment=off --dump /tmp/d && topl diagnose /tmp/d/rollout /tmp/d/training""",
    ),
    "diagnose": (
        "topl diagnose DUMP_A DUMP_B [--json] [--plots DIR] [--common]",
        "Compare two boundary dumps (HookDumper / probe --dump): the first divergence, and "
        "whether it comes from the operator path or the framework.",
        "  --json           machine-readable\n  --plots DIR      per-boundary plots\n"
        "  --common         compare only the boundaries both dumps have (else refused)",
        "  topl diagnose /tmp/d/rollout /tmp/d/training --plots /tmp/d/plots",
    ),
    "watch": (
        "topl watch [RUN_DIR] [--no-stop] [--strict] [--once] [--json] [--interval S] [--stop]",
        "Without RUN_DIR: the runs under ./runs, newest first (= `topl runs`), and how to pick one. "
        "Follow a job to its end: logdiff, reward and ratio per step and the guard's record of "
        "every verl process; in strict mode stop the job on the first step whose max logdiff is "
        "not exactly 0 (or is missing) and write why into the run's status.json. A Ray job "
        "launched without --follow is followed through the Ray Job API, a Slurm job through squeue / "
        "scontrol / sacct, and its end recorded. "
        "Exit: 0 succeeded (--once: not ended, nothing wrong yet), 1 stopped, failed or "
        "interrupted, 2 bad input, 3 a dry run (nothing started).",
        "  --no-stop        only show, never stop the job\n"
        "  --strict         stop on logdiff != 0 even if the spec is not strict\n"
        "  --once           read what is there and exit\n"
        "  --json           a summary object instead of the table\n"
        "  --interval S     seconds between reads (default 1.0)\n"
        "  --stop           stop the job now (Ray: stop_job, Slurm: scancel, else SIGTERM to its "
        "topl) and wait for its end to be recorded",
        "  topl watch runs/2026-11-29/16-20-00\n  topl launch --watch alignment=off",
    ),
    "runs": (
        "topl runs [RUN_ROOT] [--json]",
        "The runs `topl launch` wrote under RUN_ROOT (default: ./runs, the run_root it writes to), "
        "newest first, sweep points included: name, state, steps, max |Δ log p|, started, backend. "
        "Read only: a run whose status says running while its topl is gone is shown so (`topl "
        "watch RUN_DIR` records its end).",
        "  --json           {root, runs: [{name, run_dir, state, topl_gone, steps, logdiff_max,\n"
        "                   started, backend}]}",
        "  topl runs\n  topl runs /data/runs --json\n  topl watch runs/NAME   # follow one",
    ),
    "compare": (
        "topl compare PATH... [--json | --csv] [--sort KEY [--desc]] [--plot OUT.png]",
        "Runs side by side, one row each: run directories, sweep directories (every point, "
        "dropped ones too) or a quoted glob. The swept keys, verdict, state and exit, steps (a "
        "running job: its latest), max |Δ log p| and the first step it was not 0, reward at the "
        "first and last step, median step time and tokens/s, plan --rank's predicted step and "
        "measured/predicted. What a run directory lacks is said in its row.",
        "  --json           {swept, runs: [...]} (fields: docs/guide.md)\n"
        "  --csv            one line per run, for spreadsheets\n"
        "  --sort KEY       a column (step_s_median, logdiff_max, reward_last, ...) or a swept key;\n"
        "                   rows without a value last; --desc: descending\n"
        "  --plot OUT.png   reward and max |Δ log p| per step, step time vs prediction (matplotlib)",
        "  topl compare runs/multirun/20261203-120000-000000 --sort step_s_median\n"
        "  topl compare 'runs/2026*' --json\n  topl compare RUN_A RUN_B --plot cmp.png",
    ),
}


def text(cmd: str) -> str:
    import textwrap

    usage, what, flags, examples = HELP[cmd]
    out = f"usage: {usage}\n\n{textwrap.fill(what, 96)}\n\nflags:\n{flags}\n  -h, --help       this help\n"
    if cmd not in (
        "rules",
        "recipes",
        "diagnose",
        "watch",
        "compare",
        "runs",
    ):  # these take no Hydra overrides
        out += f"\n{OVERRIDES}\n"
    return out + f"\nexamples:\n{examples}\n"


def version() -> str:
    """topl's version, and the git SHA when topl runs from its own checkout (editable install).

    Only when the work tree's top level holds this very file: a non-editable install inside some
    other git repository (pyenv's own checkout, a monorepo venv) must not print that repo's SHA.
    """
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve()
    sha = ""
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
            cwd=here.parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        lines = r.stdout.split()
        if r.returncode == 0 and len(lines) == 2:
            top, head = lines
            if (Path(top) / "launcher" / "cli" / "help.py").resolve() == here:
                sha = head
    except (OSError, subprocess.SubprocessError):
        pass
    return f"topl {__version__}" + (f" (git {sha})" if sha else "")
