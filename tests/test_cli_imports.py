"""`mechsynth --help` answers without importing torch, TransformerLens, W&B or matplotlib (issue: a CLI that answers at
once): checked by the modules loaded, never by time."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformer_lens", "wandb", "matplotlib", "devinterp", "circuitsvis")


def test_help_imports_none_of_the_heavy_libraries():
    code = (
        "import sys\nfrom mechsynth.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
        "    assert e.code == 0\nprint(sorted(m for m in sys.modules if m.split('.')[0] in %r))" % (HEAVY,)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
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
