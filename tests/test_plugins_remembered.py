"""A run of a plugin's task remembers its plugin (config.json "plugins") and imports it when read, so later
commands need no MECHSYNTH_PLUGINS; a plugin that is gone is one line naming it, the run and the way out.

Every command runs in a fresh process, as a user's would: a plugin imported into pytest would stay
registered and hide what is being tested."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mechsynth import plugins

PLUGIN = '''"""A task in one file: output the token one position back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from mechsynth.config import MAX_SEED, check_fields, doc
from mechsynth.tasks import TASKS, Batch, Task, TaskSpec


@dataclass(frozen=True)
class LagCopyConfig:
    length: int = doc("tokens per sequence", 6, lo=2, hi=64)
    vocab: int = doc("distinct tokens", 4, lo=2, hi=64)
    seed: int = doc("unused: the task has no hidden structure", 0, lo=0, hi=MAX_SEED)

    def __post_init__(self):
        check_fields(self)

    context_field: ClassVar[str] = "task.length"


@TASKS.register("lag_copy")
class LagCopy(Task):
    Config = LagCopyConfig

    @property
    def spec(self) -> TaskSpec:
        names = tuple(chr(ord("a") + i) for i in range(self.cfg.vocab))
        return TaskSpec(d_vocab=self.cfg.vocab, d_vocab_out=self.cfg.vocab, n_ctx=self.cfg.length,
                        token_names=names, target_names=names)

    def sample(self, batch_size, generator, device="cpu", split="train") -> Batch:
        self.check_split(split)
        tokens = torch.randint(self.cfg.vocab, (batch_size, self.cfg.length), generator=generator, device=device)
        mask = torch.ones_like(tokens, dtype=torch.bool)
        mask[:, 0] = False
        return Batch(tokens, torch.roll(tokens, 1, dims=1), mask, {})
'''

CONFIG = """
[task]
name = "lag_copy"

[model]
n_layers = 1
n_heads = 1
d_model = 16

[train]
steps = 20
batch_size = 16
eval_every = 10
eval_batch_size = 64
checkpoints = 3
device = "cpu"

[wandb]
mode = "disabled"
"""

# A script that imports the plugin by hand (no MECHSYNTH_PLUGINS), trains a run, and sweeps two runs in a
# spawn pool, whose workers start without the plugin. Everything under main(): a spawn worker imports
# this file again, and must not import the plugin that way.
BY_HAND = """
import json


def main():
    import lag_copy  # noqa: F401  (registers the task; PYTHONPATH names its folder)

    from mechsynth import parse_config, train_run
    from mechsynth.config import read_toml
    from mechsynth.sweep import plan_of_runs, run_sweep

    data = read_toml("lag.toml")
    train_run(parse_config(data), "run", progress=False)
    runs = [({"lr": lr}, 0, {**data, "train": {**data["train"], "lr": lr}}) for lr in (0.01, 0.02)]
    outcome = run_sweep(plan_of_runs("hand", runs), "sweep", workers=2, log=lambda line: None)
    print(json.dumps(outcome.failures))


if __name__ == "__main__":
    main()
"""


def _env(plugin_path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != plugins.ENV}
    return env if plugin_path is None else {**env, plugins.ENV: plugin_path}


def _cli(*args: str, cwd: Path, plugin_path: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mechsynth.cli", *args],
        cwd=cwd,
        env=_env(plugin_path),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600
    )


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _train(where: Path) -> tuple[Path, Path]:
    """The plugin in where/plugins/, and a run of its task trained with MECHSYNTH_PLUGINS naming it (relative)."""
    (where / "plugins").mkdir(parents=True)
    plugin = where / "plugins" / "lag_copy.py"
    plugin.write_text(PLUGIN)
    (where / "lag.toml").write_text(CONFIG)
    trained = _cli("train", "lag.toml", "--out", "run", "--no-progress", cwd=where, plugin_path="plugins/lag_copy.py")
    assert trained.returncode == 0, trained.stderr
    return plugin.resolve(), where / "run"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    return _train(tmp_path_factory.mktemp("trained"))


@pytest.mark.smoke
def test_a_run_records_its_plugin_and_later_commands_need_no_variable(trained, tmp_path):
    plugin, original = trained
    stored = json.loads((original / "config.json").read_text())
    assert stored["plugins"] == [str(plugin.resolve())]  # given relative, recorded absolute
    assert stored["task"]["name"] == "lag_copy" and "versions" in stored
    run = tmp_path / "run"
    shutil.copytree(original, run)

    probed = _cli("probe", "run", "--json", cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr
    tl = json.loads(probed.stdout)
    assert tl["steps"] and tl["probes"], tl  # probes ran on every checkpoint of the plugin task's run
    assert all(len(series) == len(tl["steps"]) for p in tl["probes"].values() for series in p["per_head"].values())

    # The variable naming the same file (spelt another way) beside the record imports it once.
    reported = _cli("report", "run", cwd=tmp_path, plugin_path=os.path.relpath(plugin, tmp_path))
    assert reported.returncode == 0, reported.stderr
    assert "lag_copy" in (run / "report.html").read_text()

    loaded = _python(
        "from mechsynth import load_run\nr = load_run('run')\n"
        "print(r.config.task_name, r.steps, type(r.task).__name__)",
        cwd=tmp_path,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split()[0] == "lag_copy" and loaded.stdout.split()[-1] == "LagCopy", loaded.stdout

    resumed = _cli("train", "--resume", "run", "--set", "train.steps=30", "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 30
    assert json.loads((run / "config.json").read_text())["plugins"] == [str(plugin.resolve())]


@pytest.mark.smoke
def test_a_plugin_imported_by_hand_is_recorded_and_reaches_sweep_workers(tmp_path):
    (tmp_path / "plugins").mkdir()
    plugin = tmp_path / "plugins" / "lag_copy.py"
    plugin.write_text(PLUGIN)
    (tmp_path / "lag.toml").write_text(CONFIG)
    (tmp_path / "by_hand.py").write_text(BY_HAND)
    out = subprocess.run(
        [sys.executable, "by_hand.py"],
        cwd=tmp_path,
        env=_env() | {"PYTHONPATH": str(tmp_path / "plugins")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == []  # both sweep runs trained in the pool's workers

    configs = [tmp_path / "run/config.json", *sorted((tmp_path / "sweep/runs").glob("*/seed_0/config.json"))]
    assert len(configs) == 3
    for path in configs:
        assert json.loads(path.read_text())["plugins"] == [str(plugin.resolve())], path
    assert json.loads((tmp_path / "sweep/sweep.json").read_text())["plugins"] == [str(plugin.resolve())]

    for run in ("run", str(configs[-1].parent.relative_to(tmp_path))):
        probed = _cli("probe", run, cwd=tmp_path)
        assert probed.returncode == 0, probed.stderr
        assert "table:" in probed.stdout


@pytest.mark.smoke
def test_a_moved_plugin_is_one_line_naming_it_and_leaves_the_run_as_it_was(tmp_path):
    plugin, run = _train(tmp_path)
    moved = tmp_path / "elsewhere" / "lag_copy.py"
    moved.parent.mkdir()
    plugin.rename(moved)
    before = _files(run)

    for args in (("probe", "run"), ("report", "run"), ("train", "--resume", "run", "--set", "train.steps=30")):
        out = _cli(*args, cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (args, out.stderr)
        assert out.stderr.startswith("mechsynth: error: run/config.json: trained with plugin ")
        assert f"{plugin}, which cannot be found" in out.stderr and "MECHSYNTH_PLUGINS" in out.stderr
        assert "cannot be read" not in out.stderr  # not reported as a damaged file
    loaded = _python(
        "from mechsynth import load_run\nfrom mechsynth.errors import PluginError\n"
        "try:\n    load_run('run')\nexcept PluginError as e:\n    print(e)\n",
        cwd=tmp_path,
    )
    assert loaded.returncode == 0 and f"trained with plugin {plugin}, which cannot be found" in loaded.stdout, loaded

    plugin.write_text("import no_such_module_here\n")  # a file there again, but one that fails to import
    out = _cli("probe", "run", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"trained with plugin {plugin}, which fails to import" in out.stderr and "no_such_module_here" in out.stderr
    assert _files(run) == before  # nothing written, nothing left behind (no lock, no report)
    plugin.unlink()

    # The way out: the variable says where the plugin is now; a resume records the new place.
    resumed = _cli(
        "train", "--resume", "run", "--set", "train.steps=30", "--no-progress", cwd=tmp_path, plugin_path=str(moved)
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "config.json").read_text())["plugins"] == [str(moved)]
    probed = _cli("probe", "run", cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr


@pytest.mark.smoke
def test_a_run_that_recorded_no_plugin_names_the_variable(trained, tmp_path):
    """Runs made before plugins were recorded: an unknown task is not a damaged file."""
    _, original = trained
    run = tmp_path / "run"
    shutil.copytree(original, run)
    stored = json.loads((run / "config.json").read_text())
    del stored["plugins"]
    (run / "config.json").write_text(json.dumps(stored))
    out = _cli("probe", "run", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("mechsynth: error: run/config.json: names task 'lag_copy'")
    assert "set MECHSYNTH_PLUGINS to the module or .py file that defines it" in out.stderr
    assert "cannot be read" not in out.stderr


def test_a_run_of_built_in_parts_records_no_plugin(monkeypatch):
    monkeypatch.delenv(plugins.ENV, raising=False)
    config = {"task": {"name": "markov_icl"}, "model": {"kind": "transformer"}, "train": {"optimizer": "adamw"}}
    assert plugins.recorded(config) == []
    monkeypatch.setenv(plugins.ENV, os.pathsep.join(["some.module", "rel/p.py"]))
    assert plugins.recorded(config) == ["some.module", str(Path("rel/p.py").resolve())]  # (read, not imported)
