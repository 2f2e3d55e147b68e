"""The tutorials in docs/tutorials/ run as written: every ```python block in order in one process, every
line of a ```bash block as that `mechsynth` command, in a fresh directory; then what they promise is on disk.
Other pages' examples that say they run (a `<!-- ci: runs -->` line before the block) run the same way, and
every other ```python block in docs/ at least parses."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"


def script(markdown: str) -> str:
    """The page as one Python program: python blocks as they are, except a block titled with a file name
    (```python title="x.py"), which is written to that file; shell lines as subprocess calls, each a mechsynth
    command with environment variables before it if it likes (`MECHSYNTH_PLUGINS=x.py mechsynth ...`)."""
    out = ["import os, subprocess, sys"]
    for lang, title, body in re.findall(r'```(python|bash)(?: title="([^"]+)")?\n(.*?)```', markdown, flags=re.S):
        if title:
            out.append(f"open({title!r}, 'w').write({body!r})")
        elif lang == "python":
            out.append(body)
        else:
            for line in filter(None, (s.strip() for s in body.splitlines())):
                words, env = shlex.split(line), {}
                while words and re.match(r"[A-Za-z_]\w*=", words[0]):
                    key, value = words.pop(0).split("=", 1)
                    env[key] = value
                assert words[:1] == ["mechsynth"], f"a tutorial's shell line is not a mechsynth command: {line}"
                out.append(
                    f"subprocess.run([sys.executable, '-m', 'mechsynth.cli', *{words[1:]!r}], check=True, "
                    f"env={{**os.environ, **{env!r}}})"
                )
    return "\n".join(out)


def run_tutorial(name: str, cwd: Path) -> str:
    env = {**os.environ, "WANDB_DIR": str(cwd)}  # (the suite's own WANDB_* directories are under tmp too)
    done = subprocess.run(
        [sys.executable, "-c", script((TUTORIALS / name).read_text())],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr  # (a warning, e.g. W&B's that it did not start, is then in an assertion's message)


def test_the_tutorials_are_the_pages_under_docs():
    assert sorted(p.name for p in TUTORIALS.glob("*.md")) == [
        "benchmark_your_method.md",
        "bring_checkpoints.md",
        "own_training_loop.md",
        "what_it_represents.md",
    ]


@pytest.mark.smoke
def test_what_my_model_represents(tmp_path):
    out = run_tutorial("what_it_represents.md", tmp_path)
    ours = json.loads((tmp_path / "runs" / "d8" / "probes.json").read_text())["probes"]
    assert {"state/L1", "flip/L1", "rotation/chance"} <= set(ours["latents"]["metrics"])
    assert {"state/auroc", "flip/mcc", "explained", "budget/steps"} <= set(ours["dictionary"]["metrics"])
    assert "latents       state: " in out and "dictionary    flip: " in out
    yours = json.loads((tmp_path / "runs" / "my-loop" / "probes.json").read_text())["probes"]
    assert {"latents", "dictionary"} <= set(yours) and yours["dictionary"]["options"]["kind"] == "relu"


@pytest.mark.smoke
def test_probe_your_own_training_loop(tmp_path):
    out = run_tutorial("own_training_loop.md", tmp_path)
    run = tmp_path / "runs" / "my-loop"
    probed = json.loads((run / "probes.json").read_text())
    assert probed["probes"]["previous_token"]["options"]["offset"] == 2  # the second `mechsynth probe` kept its option
    assert any(step is not None for heads in probed["probes"].values() for step in heads["formation"].values())
    assert "formed at step" in out and (run / "report.html").stat().st_size > 100_000
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")), out[-2000:]


@pytest.mark.smoke
def test_bring_checkpoints(tmp_path):
    out = run_tutorial("bring_checkpoints.md", tmp_path)
    imported = json.loads((tmp_path / "runs" / "imported" / "probes.json").read_text())
    assert imported["steps"] == [0, 10, 30, 100, 300]
    tracr = json.loads((tmp_path / "runs" / "tracr" / "probes.json").read_text())
    last = {h: series[-1] for h, series in tracr["probes"]["previous_token"]["per_head"].items()}
    assert max(last, key=last.get) == "L1H0"
    assert (tmp_path / "runs" / "imported" / "report.html").exists() and (
        tmp_path / "runs" / "held" / "report.html"
    ).exists()
    assert "loss falls fastest" in out or "loss never falls" in out


@pytest.mark.smoke
def test_benchmark_your_method(tmp_path):
    """A method in a plugin file outside the repository is benchmarked by one command and has its rows beside the
    built-in methods' on every zoo case."""
    out = run_tutorial("benchmark_your_method.md", tmp_path)
    results = json.loads((tmp_path / "bench" / "bench_circuits.json").read_text())
    assert results["methods"] == ["patching", "eap", "eap_ig", "node_patching"]
    table = (tmp_path / "bench" / "leaderboard.md").read_text()
    for case in results["cases"]:
        assert all(f"| {m} | {case} |" in table for m in results["methods"]), case
    rows = {(r["method"], r["case"]): r for r in results["leaderboard"]}
    assert rows[("node_patching", "planted_induction_3h")]["auroc"] is not None and "node_patching" in out
    assert (tmp_path / "bench" / "bench_circuits.html").stat().st_size > 10_000
    assert list((tmp_path / "bench" / "wandb").glob("offline-run-*/run-*.wandb")), out[-2000:]


DOCS = ROOT / "docs"
RUNS = re.compile(r"<!-- ci: runs[^>]*-->\n```python\n(.*?)```", flags=re.S)


def run_examples(page: str, cwd: Path) -> str:
    """The page's `<!-- ci: runs -->` python blocks, in order in one process, in `cwd`."""
    blocks = RUNS.findall((DOCS / page).read_text())
    assert blocks, f"docs/{page} has no example marked to run"
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "WANDB_DIR": str(cwd)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_every_python_block_in_the_docs_parses():
    for page in sorted(DOCS.rglob("*.md")):
        for i, body in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)):
            try:
                ast.parse(body)
            except SyntaxError as e:
                pytest.fail(f"{page.relative_to(ROOT)}, python block {i + 1}: {e}")


@pytest.mark.smoke
def test_getting_started_from_python_runs(tmp_path):
    # the page's run, made short: the example reads any run of that config
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mechsynth.cli",
            "train",
            str(ROOT / "examples" / "sparse_parity.toml"),
            "--out",
            "runs/parity",
            "--set",
            "train.steps=20",
            "--set",
            "wandb.mode=disabled",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=600,
    )
    run_examples("getting-started.md", tmp_path)


@pytest.mark.smoke
def test_the_trainer_callback_examples_run(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pytest.importorskip("lightning")
    run_examples("concepts/yours.md", tmp_path)
    for name in ("hf", "lightning"):
        probed = json.loads((tmp_path / "runs" / name / "probes.json").read_text())
        assert probed["steps"][-1] == 20 and "previous_token" in probed["probes"]
