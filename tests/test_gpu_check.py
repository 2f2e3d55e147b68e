"""`make gpu-check` (benchmarks/gpu_check.py) runs end to end on the CPU at its quick size, so that on a GPU only
CUDA can fail; docs/speed.md's GPU part is what benchmarks/speed_doc.py makes of assets/gpu_check.json."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import speed_doc

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.smoke
def test_gpu_check_runs_every_section_on_the_cpu(tmp_path):
    from mechsynth import models, probes

    out_path = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_check",
            "--device",
            "cpu",
            "--size",
            "quick",
            "--out",
            str(out_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    out = json.loads(out_path.read_text())
    assert done.returncode == 0 and out["failures"] == [], (out["failures"], done.stderr[-3000:])
    assert out["complete"] and out["device"]["type"] == "cpu" and out["versions"]["torch"]
    assert list(out["sections"]) == [
        "train",
        "seeds",
        "probes",
        "circuits",
        "sweep",
        "bench_train",
        "bench_probe",
        "bench_landscape",
    ]
    assert all(s["ok"] and s["seconds"] > 0 for s in out["sections"].values())
    trained = {label.split("/")[0] for label, run in out["sections"]["train"]["runs"].items() if run}
    assert trained == set(models.names())
    assert out["sections"]["probes"]["covered"] == probes.names()
    ratios = out["ratios"]
    for s in (1, 8, 32):
        assert ratios[f"seeds/S={s}/batched_vs_sequential"] > 0
        assert out["sections"]["seeds"][f"S={s}"]["max_weight_difference"] <= 1e-3
    for key in (
        "bench_train/mechsynth/bare",
        "bench_train/mechsynth/tl_helper",
        "bench_probe/mechsynth/bare",
        "circuits/eap/x_forward",
        "circuits/acdc/agreement",
        "bench_landscape/llc/bare_sgld",
        "sweep/model_steps_per_s",
    ):
        assert ratios[key] is not None and math.isfinite(ratios[key]) and ratios[key] > 0, key
    assert "section" in done.stdout and "bench_landscape" in done.stdout  # the table it printed
    # Every number docs/speed.md shows is in the JSON.
    assert speed_doc.MISSING not in speed_doc.generate(out)


def test_the_speed_page_shows_what_assets_gpu_check_json_holds():
    assert speed_doc.main(["--check"]) == 0


def test_the_speed_page_names_each_failure(tmp_path):
    out = {
        "device": {"type": "cuda", "name": "GPU"},
        "size": "full",
        "commit": "abc",
        "started": "2026-01-02T00:00:00",
        "seconds": 100.0,
        "versions": {"torch": "2.11", "cuda": "13.0", "transformer_lens": "4.3"},
        "ratios": {"bench_train/mechsynth/bare": 1.2},
        "sections": {"bench_train": {"ok": True}, "seeds": {"ok": False}},
        "failures": [{"section": "seeds", "item": "S=8", "error": "RuntimeError", "message": "CUDA error: boom"}],
    }
    doc = tmp_path / "speed.md"
    doc.write_text(f"# Speed\n\n{speed_doc.BEGIN}\nold\n{speed_doc.END}\n\nafter\n")
    (tmp_path / "gpu_check.json").write_text(json.dumps(out))
    args = ["--doc", str(doc), "--json", str(tmp_path / "gpu_check.json")]
    assert speed_doc.main(["--check", *args]) == 1
    assert speed_doc.main(args) == 0 and speed_doc.main(["--check", *args]) == 0
    text = doc.read_text()
    assert (
        "1.20× bare" in text and "seeds (S=8): `RuntimeError`: CUDA error: boom" in text and text.endswith("\nafter\n")
    )
    assert "Sections that ran without a failure: bench_train" in text and speed_doc.MISSING in text
