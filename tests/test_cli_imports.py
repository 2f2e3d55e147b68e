"""`mechsynth --help` answers without importing torch, TransformerLens, W&B or matplotlib (issue: a CLI that answers at
once): checked by the modules loaded, never by time."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformer_lens", "wandb", "matplotlib", "devinterp", "circuitsvis")


def test_help_imports_none_of_the_heavy_libraries():
    code = ("import sys\nfrom mechsynth.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0\nprint(sorted(m for m in sys.modules if m.split('.')[0] in %r))" % (HEAVY,))
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
