"""One JobSpec -> engines adapter (launcher/run/engines.py) for both the local backend and the probe,
with the micro-batch verl uses for each pass."""

import pytest

from topl.launcher.run import engines

pytest.importorskip("torch")

# three different micro-batches, so a pass that reads the wrong field shows
MICRO = [
    "rollout.log_prob_micro_batch_size_per_gpu=3",
    "train.ppo_micro_batch_size_per_gpu=5",
    "train.log_prob_micro_batch_size_per_gpu=7",
]


@pytest.fixture
def spy(monkeypatch):
    calls = []
    real = engines.engine_settings

    def recorded(spec):
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(engines, "engine_settings", recorded)
    return calls


def test_each_micro_batch_is_the_one_verl_uses_for_that_pass(compose):
    e = engines.engine_settings(compose(MICRO).to_object())
    assert (e.log_prob_micro_batch, e.update_micro_batch, e.ref_micro_batch) == (3, 5, 7)


def test_the_local_backend_builds_its_loop_through_the_adapter(compose, spy):
    from topl.launcher.run.backends.local import loop_config

    spec = compose(MICRO).to_object()
    cfg = loop_config(spec)
    assert spy == [spec]
    # the loop's recompute, update and reference passes get verl's fields (before: the update's
    # ppo_micro_batch_size_per_gpu for all three)
    assert (cfg.log_prob_micro_batch, cfg.micro_batch, cfg.ref_micro_batch) == (3, 5, 7)
    e = engines.engine_settings(spec)
    assert (cfg.train_tp, cfg.rollout_tp, cfg.block_size, cfg.max_num_seqs) == (
        e.train_tp,
        e.rollout_tp,
        e.block_size,
        e.max_num_seqs,
    )


def test_the_probe_builds_its_engines_through_the_adapter(compose, spy, monkeypatch):
    import topl.kernels.probe as kprobe
    from topl.launcher.cli.probe import run

    got = {}

    def fake_probe(model, alignment, **kw):
        got.update(kw)
        return {}

    monkeypatch.setattr(kprobe, "probe", fake_probe)
    spec = compose(MICRO).to_object()
    run(spec, prompts=2)
    assert spy == [spec]
    # the probe's training pass is the old-log-prob recompute (before: the reference's field, 7)
    assert got["micro_batch"] == 3
    assert got["block_size"] == spec.rollout.block_size and got["train_tp"] == spec.train.tp


def test_the_loop_uses_each_micro_batch_for_its_pass(compose, monkeypatch):
    """The kernels' loop builds a TrainingEngine per pass with that pass's micro-batch."""
    from topl.kernels import rl_loop
    from topl.launcher.run.backends.local import loop_config

    seen = []
    real = rl_loop.TrainingEngine

    class Recording(real):
        def __init__(self, model, side, micro_batch=8):
            seen.append(micro_batch)
            super().__init__(model, side, micro_batch)

    monkeypatch.setattr(rl_loop, "TrainingEngine", Recording)
    # one step of 2 prompts x 2 samples (not 8 x 8): each pass still builds its engine, a quarter
    # of the default step's compute
    small = ["train.steps=1", "train.train_batch_size=2", "rollout.n=2"]
    cfg = loop_config(compose([*MICRO, *small, "algorithm.use_kl_loss=true"]).to_object())
    next(rl_loop.run(cfg))
    assert seen == [3, 5, 7]  # recompute, update, reference
