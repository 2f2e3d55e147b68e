"""Circuit discovery as a benchmark over training: every registered method (`mechsynth.circuits.METHODS`, yours
included through MECHSYNTH_PLUGINS) on every case of the zoo (`zoo`: planted, tracr-compiled and trained models)
at every checkpoint, scored against the case's known circuit (`bench`), written as a JSON, a leaderboard, figures,
an HTML page and a W&B table (`output`). `mechsynth bench-circuits` runs it; so does

    from mechsynth import benchmark
    results = benchmark.run("bench-out", methods=["eap", "my_method"], size="smoke")
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from mechsynth.errors import ConfigError

SIZES: dict[str, dict[str, Any]] = {
    # seconds: the planted case, two compiled programs, and markov_icl trained for a few steps
    "smoke": {
        "planted": [3],
        "tracr": ["frac_prevs", "detect_pattern"],
        "trained": {"markov_icl": 40},
        "checkpoints": 3,
        "batch": 16,
    },
    # minutes on 2 cores: the compiled programs but dyck2_prefix (1108 edges: ACDC alone tries each in turn), the
    # trained tasks through their phase transitions
    "cpu": {
        "planted": [1, 3],
        "tracr": ["count_so_far", "detect_pattern", "frac_prevs", "pair_balance", "prev_token", "running_max"],
        "trained": {"markov_icl": None, "sparse_boolean": None, "causal_icl": None},
        "checkpoints": 10,
        "batch": 32,
    },
    # a GPU's: every compiled program, longer runs, every checkpoint of 40
    "full": {
        "planted": [1, 3],
        "tracr": None,
        "trained": {"markov_icl": 4000, "sparse_boolean": 6000, "causal_icl": 6000},
        "checkpoints": 40,
        "batch": 64,
    },
}
RESULTS = "bench_circuits.json"


def methods_checked(names: Optional[Sequence[str]], options: dict[str, dict[str, Any]]) -> list[str]:
    """The methods to run (every registered one when `names` is None), exact patching first (the reference), each
    with its options checked: ConfigError naming the method or option before any work."""
    from mechsynth import circuits
    from mechsynth.benchmark.bench import EXACT

    chosen = list(circuits.METHODS) if not names else list(dict.fromkeys(names))
    for name in chosen:
        if name not in circuits.METHODS:
            raise ConfigError(
                "--methods",
                f"unknown circuit method {name!r}; allowed: {', '.join(circuits.METHODS)} "
                "(or a plugin's, named in MECHSYNTH_PLUGINS)",
            )
    for name, given in options.items():
        if name not in chosen:
            raise ConfigError(
                f"--set {name}", f"options for method {name!r}, which is not run; running: {', '.join(chosen)}"
            )
        circuits.method_options(name, given)
    return [EXACT] + [m for m in chosen if m != EXACT]


def cases(size: str, out: Path, names: Optional[Sequence[str]] = None) -> list[Any]:
    """The zoo at `size` (`SIZES`), or the cases of it `names` names; trained models are trained into (or reused
    from) `out/zoo/`. ConfigError for a name the zoo has not, before anything is built."""
    from mechsynth.benchmark import zoo

    spec = SIZES[size]
    made: dict[str, Callable[[], Any]] = {
        f"planted_induction_{n}h": lambda n=n: zoo.planted_case(n) for n in spec["planted"]
    }
    made |= {f"tracr_{p}": lambda p=p: zoo.tracr_case(p) for p in (spec["tracr"] or zoo.tracr_programs())}
    made |= {
        f"trained_{t}": lambda t=t, s=s: zoo.trained_case(t, out / "zoo" / t, spec["checkpoints"], spec["batch"], s)
        for t, s in spec["trained"].items()
    }
    unknown = [n for n in names or () if n not in made]
    if unknown:
        raise ConfigError("--cases", f"no zoo case {unknown[0]!r} at size {size}; allowed: {', '.join(made)}")
    return [make() for name, make in made.items() if not names or name in names]


def provenance(started: float) -> str:
    from mechsynth.runs.rundir import versions

    v = versions()
    return (
        f"commit {v.get('commit', 'none (installed package)')}; mechsynth {v['mechsynth']}, torch {v['torch']}, "
        f"TransformerLens {v['transformer_lens']}; CPU ({platform.machine()}); {time.time() - started:.0f} s"
    )


def run(
    out: Path | str,
    methods: Optional[Sequence[str]] = None,
    size: str = "cpu",
    options: Optional[dict[str, dict[str, Any]]] = None,
    case_names: Optional[Sequence[str]] = None,
    log: Optional[Callable[[str], None]] = None,
) -> dict[str, Any]:
    """Benchmark `methods` on the zoo at `size` into `out` (RESULTS, leaderboard.md, bench_circuits.html and .png);
    returns the results, with the leaderboard's rows under "leaderboard"."""
    import torch

    from mechsynth.benchmark import bench, output

    if size not in SIZES:
        raise ConfigError("--size", f"{size!r}; allowed: {', '.join(SIZES)}")
    options = dict(options or {})
    from mechsynth.runs.io import write_json
    from mechsynth.runs.rundir import check_writable, json_safe

    chosen = methods_checked(methods, options)
    out = Path(out)
    check_writable(out, "--out")
    zoo_cases = cases(size, out, case_names)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    torch.manual_seed(0)
    results: dict[str, Any] = {"methods": chosen, "options": options, "size": size, "cases": {}}
    for case in zoo_cases:
        results["cases"][case.name] = bench.run_case(case, chosen, options, log)
    results["provenance"] = provenance(started)
    results["leaderboard"] = bench.leaderboard(results, chosen)
    results = json_safe(results)
    write_json(out / RESULTS, results)
    output.write(out, results, results["leaderboard"], chosen)
    return results
