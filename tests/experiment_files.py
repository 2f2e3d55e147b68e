"""What the tests of experiments/ share: loading a script afresh, running one at its smoke size, and finding and
judging one claim of a rules file."""

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Union

import torch

from experiments import verdicts

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def script(name: str) -> ModuleType:
    """experiments/<name>.py, freshly executed."""
    spec = importlib.util.spec_from_file_location(f"experiment_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loaded(name: str) -> Iterator[ModuleType]:
    """For a module-scoped fixture (`yield from loaded(NAME)`): the script, and the process's torch thread
    count restored afterwards (a script's run sets it)."""
    threads = torch.get_num_threads()
    yield script(name)
    torch.set_num_threads(threads)


def smoke(module: ModuleType, out: Path, monkeypatch: Any, workers: Optional[int] = 1) -> dict:
    """Run a loaded script at --smoke into `out`, its runs and W&B directories there too, and return its JSON
    (`workers`: None leaves the script's default, a job per core)."""
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(out / "wandb" / var.lower()))
    pool = [] if workers is None else ["--workers", str(workers)]
    assert module.main(["--smoke", "--out", str(out), "--runs", str(out / "runs"), *pool]) == 0
    return json.loads((out / f"{module.NAME}.json").read_text())


def claim(rules: Union[str, ModuleType], cid: str) -> verdicts.Claim:
    """Claim `cid` of a rules file (its experiment's name, or the loaded module)."""
    module = verdicts.rules_of(rules) if isinstance(rules, str) else rules
    return next(c for c in module.CLAIMS if c.id == cid)


def judged(rules: Union[str, ModuleType], cid: str, results: Any) -> dict:
    """The claim's judgement of `results`, its why-line one line that reads what it needs and never says None."""
    out = verdicts.judged(claim(rules, cid), results)
    assert "\n" not in out["why"] and "None" not in out["why"] and "lack" not in out["why"], out["why"]
    return out


def rules_repo(root: Path, verdicts_source: str) -> Callable[..., str]:
    """A git repository at `root` with experiments/verdicts.py committed and experiments/rules/ made, as the
    provenance checks see a checkout; returns `git(*args)`, which runs there and gives its output."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()

    (root / "experiments/rules").mkdir(parents=True)
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    (root / "experiments/verdicts.py").write_text(verdicts_source)
    return git
