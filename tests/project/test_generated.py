"""Generated files stay equal to their generators' output."""

import importlib.util

from paths import ROOT

from topl.launcher.spec.fields import fields_markdown


def _gen_recipes():
    spec = importlib.util.spec_from_file_location(
        "gen_recipes", ROOT / "scripts" / "gen_recipes.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_matrix_recipes_equal_the_generator_output():
    matrix = _gen_recipes().matrix()
    assert len(matrix) == 36 + 24  # the matrix on stack=seed, the strict stock-stack recipes
    for name, text in matrix.items():
        assert (ROOT / "recipes" / name).read_text() == text, (
            f"regenerate: python scripts/gen_recipes.py ({name})"
        )


def test_generator_check_mode_flags_a_hand_edit(tmp_path, monkeypatch):
    gen = _gen_recipes()
    for name, text in gen.matrix().items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(gen, "RECIPES", tmp_path)
    assert gen.main(["--check"]) == 0
    edited = tmp_path / "qwen3_4b_grpo_a2_strict.yaml"
    edited.write_text(edited.read_text().replace("nodes: 1", "nodes: 2"))
    assert gen.main(["--check"]) == 1


def test_field_reference_matches_the_spec():
    text = (ROOT / "docs" / "fields.md").read_text()
    assert text == fields_markdown(), "regenerate docs/fields.md (command at its top)"


def test_every_spec_field_is_documented():
    from topl.launcher.spec.fields import rows
    from topl.launcher.spec.job import JobSpec

    undocumented = [key for key, _, _, doc in rows(JobSpec) if not doc]
    assert not undocumented, undocumented
