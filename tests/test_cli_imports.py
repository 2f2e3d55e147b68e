"""`mechsynth --help` answers without importing torch, TransformerLens, W&B or matplotlib (issue: a CLI that answers at
once): checked by the modules loaded, never by time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformer_lens", "wandb", "matplotlib", "devinterp", "circuitsvis")


def _in_fresh_python(body: str) -> subprocess.CompletedProcess:
    """`body` run by a new interpreter, which then prints, on its last line, the heavy libraries it imported."""
    code = f"import sys\n{body}\nprint(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_help_imports_none_of_the_heavy_libraries():
    done = _in_fresh_python(
        "from mechsynth.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0"
    )
    assert "bench-circuits" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


def test_the_package_still_names_everything_it_exports():
    import mechsynth
    from mechsynth.cli import BACKENDS
    from mechsynth.sweep.job import BACKENDS as SWEEP_BACKENDS

    assert BACKENDS == SWEEP_BACKENDS
    assert all(callable(getattr(mechsynth, name)) or name == "tasks" for name in mechsynth.__all__)
    assert set(mechsynth.__all__) <= set(dir(mechsynth))


def test_type_checkers_and_the_api_reference_see_the_same_names_as_the_lazy_imports():
    """The `if TYPE_CHECKING:` imports (what mkdocstrings and type checkers read) name each lazy name from its module."""
    import ast
    from pathlib import Path

    import mechsynth

    tree = ast.parse(Path(mechsynth.__file__).read_text())
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    static = {
        alias.name: (node.module if node.module != "mechsynth" else f"mechsynth.{alias.name}")
        for node in block.body
        for alias in node.names
    }
    assert static == mechsynth._LAZY


def test_a_config_mistake_is_found_before_torch_is_imported(tmp_path):
    """A wrong key, type or bound in [task], [train], [wandb] or [model] is one line, exit 2, from the shipped schema:
    none of the heavy libraries imported."""
    bad = {
        "task": '[task]\nname = "markov_icl"\nk = 0\n',
        "train": '[task]\nname = "automata"\n[train]\nstep = 3\n',
        "wandb": '[task]\nname = "automata"\n[wandb]\nmode = 3\n',
        "model": '[task]\nname = "automata"\n[model]\nd_model = 2.5\n',
    }
    for section, text in bad.items():
        (tmp_path / f"{section}.toml").write_text(text)
        done = _in_fresh_python(
            f"from mechsynth.cli import main\nassert main(['train', {str(tmp_path / f'{section}.toml')!r}]) == 2"
        )
        assert done.stdout.strip().splitlines()[-1] == "[]", (section, done.stdout[-500:])
        assert done.stderr.startswith(f"mechsynth: error: {section}.") and done.stderr.count("\n") == 1, done.stderr


def test_the_shipped_schema_and_listings_are_the_code():
    """mechsynth/configs/schema.json (what the quick check and `mechsynth tasks`/`probes` read) equals what the classes
    and registries say now; when they change, `python -c "from mechsynth.cli import write_shipped; write_shipped()"`
    rewrites it."""
    import json

    from mechsynth import configs
    from mechsynth.cli import shipped

    assert configs.schema() == json.loads(json.dumps(shipped())), "schema.json is stale: rewrite it (see this test)"


def test_a_task_file_added_since_the_listing_was_written_is_listed_by_the_registry(monkeypatch):
    """Adding a task, kind or probe is one new file: until schema.json is written again, the registries answer."""
    from mechsynth import cli, configs

    monkeypatch.setattr(configs, "modules", lambda: {"tasks": ["a_new_task.py"]})
    assert configs.schema() is None
    configs.quick_check({"task": {"name": "markov_icl", "k": 0}})  # (left to the full check)
    monkeypatch.setattr(cli, "_task_table", lambda: {"a_new_task": {"doc": "new", "params": [], "latents": []}})
    assert cli._shipped_or_live("tasks", cli._task_table) == {"a_new_task": {"doc": "new", "params": [], "latents": []}}


def test_tasks_and_probes_list_without_torch_and_with_plugins_live(tmp_path):
    done = _in_fresh_python("from mechsynth.cli import main\nassert main(['tasks']) == 0 and main(['probes']) == 0")
    assert "latent variables (default config): state" in done.stdout and "dictionary:" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]
    plugin = tmp_path / "my_task.py"
    plugin.write_text((Path(__file__).parent / "toy" / "toy_task.py").read_text())
    env = {**os.environ, "MECHSYNTH_PLUGINS": str(plugin)}
    done = subprocess.run(
        [sys.executable, "-m", "mechsynth.cli", "tasks"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0 and "toy_first_token:" in done.stdout, done.stderr[-2000:]


def test_the_quick_check_says_what_the_full_check_says():
    """Every bounded integer field of every shipped task, train and the default model kind, one past its bound: the
    quick check's one line is the full check's."""
    import pytest

    from mechsynth import configs
    from mechsynth.errors import ConfigError
    from mechsynth.runs.runconfig import parse_config

    known = configs.schema()
    cases = [
        ({"task": {"name": n, f: m["meta"]["lo"] - 1}})
        for n, e in known["task"].items()
        for f, m in e.items()
        if m["type"] == "int" and "lo" in m["meta"]
    ]
    cases += [
        {"task": {"name": "automata"}, "train": {f: m["meta"]["hi"] + 1}}
        for f, m in known["train"].items()
        if m["type"] == "int" and "hi" in m["meta"]
    ]
    cases += [{"task": {"name": "automata"}, "model": {f: "x"}} for f in known["model"][known["default_kind"]]]
    assert len(cases) > 40
    for data in cases:
        with pytest.raises(ConfigError) as quick:
            configs.quick_check(data)
        with pytest.raises(ConfigError) as full:
            parse_config(data)
        assert str(quick.value) == str(full.value), data
