"""Plot a markov_icl run's loss and strategy-KL curves: the uniform -> unigram -> bigram stages.

python -m experiments.plot_stages RUN_DIR [OUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from mechsynth import load_run


def main(run_dir: str, out: str = "assets/demo_stages.png") -> None:
    run = load_run(run_dir)
    records = [r for r in run.metrics if r["step"] > 0]
    steps = [r["step"] for r in records]
    fig, (ax_loss, ax_kl) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax_loss.plot(steps, [r["eval/loss"] for r in records], color="black")
    ax_loss.set_ylabel("held-out loss (nats)")
    # With alpha = 1 the add-one n-gram estimator is the Bayes predictor: dashes keep both visible.
    styles = {
        "uniform": ("tab:gray", "-"),
        "unigram": ("tab:orange", "-"),
        "bayes": ("tab:green", "-"),
        "ngram": ("tab:blue", "--"),
    }
    for name in sorted(run.task.strategies, key=lambda n: n == "ngram"):
        colour, dash = styles[name]
        ax_kl.plot(steps, [r[f"eval/kl_{name}"] for r in records], label=name, color=colour, linestyle=dash)
    ax_kl.set_yscale("log")
    ax_kl.set_xscale("log")
    ax_kl.set_xlabel("training step")
    ax_kl.set_ylabel("KL(strategy ‖ model)")
    ax_kl.legend(title="reference predictor")
    cfg = run.config
    fig.suptitle(
        f"{cfg.task_name} k={cfg.task_params['k']}, T={cfg.task_params['length']}: "
        f"{cfg.model.n_layers}-layer attention-only, d_model {cfg.model.d_model}"
    )
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
