"""The module graph: layers that only point down and no import cycles (lazy imports inside functions and imports
for type checkers count too), and each outside edge (wandb, ray, circuitsvis, TransformerLens model classes)
imported in one place."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each package's files live (mechsynth.probes ships from probes/).
ROOTS = {"mechsynth": REPO / "mechsynth", "mechsynth.probes": REPO / "probes"}


def modules() -> dict[str, Path]:
    out = {}
    for package, root in ROOTS.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every mechsynth module `path` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            subs = {f"{base}.{a.name}" for a in node.names}
            found |= subs & known
            if not subs <= known:  # names defined in the module itself (not `from package import submodule`)
                found.add(base)
    return {m for m in found if m in known and m != name}


# The layers, lowest first (docs/layout.md): a package imports its own layer and those below, never one above.
LAYERS = [
    ("errors", "config", "registry", "plugins", "hooks", "util", "configs"),
    ("tasks",),
    ("models",),
    ("optimizers", "circuits"),
    ("training",),
    ("runs",),
    ("probes",),
    ("analysis",),
    ("yours", "benchmark"),
    ("sweep",),
    ("cli",),
]
LAYER = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def package_of(module: str) -> str:
    """mechsynth.runs.rundir -> runs; mechsynth.cli -> cli; mechsynth (the package's face) -> mechsynth."""
    return (module.split(".") + ["mechsynth"])[1] if module != "mechsynth" else "mechsynth"


def test_layers_only_point_down():
    mods = modules()
    assert {package_of(m) for m in mods} - {"mechsynth"} == set(LAYER), "a package docs/layout.md gives no layer"
    up = sorted(
        f"{name} -> {target} ({package_of(name)} is below {package_of(target)})"
        for name, path in mods.items()
        if name != "mechsynth"
        for target in imports(path, name, set(mods))
        if target == "mechsynth" or LAYER[package_of(target)] > LAYER[package_of(name)]
    )
    assert not up, "imports that point up a layer (docs/layout.md):\n" + "\n".join(up)
    layout = (REPO / "docs" / "layout.md").read_text()
    assert " → ".join(" ".join(layer) for layer in LAYERS) in layout, (
        "docs/layout.md names the layers as LAYERS has them"
    )


def test_no_import_cycles():
    mods = modules()
    graph = {name: imports(path, name, set(mods)) for name, path in mods.items()}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
    assert "mechsynth.runs.rundir" in graph and graph["mechsynth.runs.rundir"] <= {
        "mechsynth.runs.io",
        "mechsynth.errors",
        "mechsynth.plugins",
    }, "the run-directory module is a leaf: it knows files (and the plugins a run came from), not models or training"
    assert graph["mechsynth.plugins"] <= {"mechsynth.errors"}, "plugins are imported before any registry is looked up"


def test_each_edge_is_imported_in_one_place():
    owners = {
        "wandb": "mechsynth.runs.wandb_log",
        "ray": "mechsynth.sweep.ray_backend",
        "circuitsvis": "mechsynth.analysis.views",
        "transformer_lens": "mechsynth.models.tl_compat",
        "transformers": "mechsynth.yours.callbacks",
        "lightning": "mechsynth.yours.callbacks",
        "pytorch_lightning": "mechsynth.yours.callbacks",
        "devinterp": "mechsynth.probes.llc",
        "sparsify": "mechsynth.probes._sae",
        "sae_lens": "nowhere: tests only",
    }
    users: dict[str, set[str]] = {k: set() for k in owners}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for n in names:
                if n.split(".")[0] in owners:
                    users[n.split(".")[0]].add(name)
    assert all(users[k] <= {owners[k]} for k in owners), users


# What the top of mechsynth/ holds (docs/layout.md): the package's face, the CLI and what every part shares (config
# fields, errors, hook names, the registries and their plugins); everything else lives in a folder by purpose.
TOP_MODULES = {"__init__.py", "cli.py", "config.py", "errors.py", "hooks.py", "plugins.py", "registry.py"}
PACKAGES = {
    "analysis",
    "benchmark",
    "circuits",
    "configs",
    "models",
    "optimizers",
    "runs",
    "sweep",
    "tasks",
    "training",
    "util",
    "yours",
}


def test_the_top_level_stays_small():
    """A new module goes into the folder of its purpose, not beside cli.py (the layout does not regrow flat)."""
    root = ROOTS["mechsynth"]
    assert {p.name for p in root.glob("*.py")} == TOP_MODULES, "a module at the top of mechsynth/: see docs/layout.md"
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("__", "."))}
    assert folders == PACKAGES, "a folder in mechsynth/ that docs/layout.md does not describe (or one gone)"
    layout = (REPO / "docs" / "layout.md").read_text()
    undescribed = [n for n in TOP_MODULES - {"__init__.py"} if n not in layout]
    undescribed += [f"mechsynth/{p}/" for p in PACKAGES if f"mechsynth/{p}/" not in layout]
    assert not undescribed, f"docs/layout.md does not say what these are for: {undescribed}"


def test_every_package_ships():
    """pyproject.toml lists the packages the wheel holds: every folder of mechsynth (and probes) must be there."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert listed == found, (
        f"missing from pyproject.toml: {sorted(found - listed)}; not in the tree: {sorted(listed - found)}"
    )


def test_no_file_edits_the_import_path():
    """pyproject's package-dir installs ./probes as mechsynth.probes, and experiments/ and benchmarks/ are packages
    run from the checkout's root (`python -m experiments.NAME`): no file edits sys.path or a package's __path__."""
    edits = re.compile(
        r"\bsys\.path\.(insert|append|extend)|\bsys\.path\[[^]]*\]\s*=|__path__\s*(\.append|\.extend|\+?=)"
    )
    files = [p for p in REPO.glob("**/*.py") if not p.relative_to(REPO).parts[0].startswith((".", "site", "build"))]
    touched = [str(p.relative_to(REPO)) for p in files if p != Path(__file__) and edits.search(p.read_text())]
    assert not touched, touched


WHEEL_CHECK = """
import pathlib, sys
import mechsynth, mechsynth.probes
site = pathlib.Path(sys.argv[1]).resolve()
for module in (mechsynth, mechsynth.probes):
    assert pathlib.Path(module.__file__).resolve().is_relative_to(site), module.__file__
assert len(mechsynth.probes.names()) > 20 and pathlib.Path(mechsynth.probes.__file__).parent.name == "probes"
"""


@pytest.mark.smoke
def test_a_wheel_install_passes_the_import_and_contract_tests(tmp_path):
    """The wheel (not an editable install) holds every module, the probes as mechsynth.probes, the shipped configs
    and the zoo's compiled programs: built from a copy of the tree, installed into a folder of its own, and the
    contract and CLI-import tests run from a copy of the suite against it (the checkout itself is on no path)."""
    import shutil
    import subprocess
    import sys

    src, site, work = tmp_path / "src", tmp_path / "site", tmp_path / "work"
    for name in ("mechsynth", "probes"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("tests", "experiments", "examples"):  # (the contract tests read the example configs)
        shutil.copytree(REPO / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "runs"))
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")  # pytest's options and markers
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next((tmp_path / "dist").glob("mechsynth-*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True, timeout=300
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", WHEEL_CHECK, str(site)], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow and not smoke",
            "tests/test_contracts.py",
            "tests/test_cli_imports.py",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_each_name_is_imported_from_where_it_is_defined():
    """ConfigError lives in mechsynth.errors; mechsynth.config re-exports it for code written against it, but the
    project imports it from its home, so a reader finds one place."""
    files = [p for p in REPO.glob("**/*.py") if not p.relative_to(REPO).parts[0].startswith((".", "site", "build"))]
    elsewhere = [
        str(p.relative_to(REPO))
        for p in files
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module == "mechsynth.config"
        and any(a.name == "ConfigError" for a in node.names)
    ]
    assert not elsewhere, elsewhere
