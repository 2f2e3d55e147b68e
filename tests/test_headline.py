"""The loss headline finds the transition: where the loss leaves its plateau (a loss change point) and falls
fastest after, not the first steps' fall from the initialisation; and on a loss with no plateau it says so rather
than invent one. Checked against planted loss curves (a known plateau exit, written by hand), the demo config's
recorded curve, a Monitor run and a run with no plateau."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import mechsynth
from mechsynth import load_run, models, parse_config, train_run
from mechsynth.analysis import stages, timeline
from mechsynth.analysis.timeline import Timeline, drop_line, loss_transition, steepest_drop
from mechsynth.training.train import checkpoint_steps

# `mechsynth train`'s checkpoint schedule for the demo (2000 steps, 100 checkpoints): log-spaced early, linear later
STEPS = checkpoint_steps(2000, 100)
EXIT = 200  # the planted plateau's end


def _planted(fall: float = 0.15) -> list[float]:
    """1.40 at step 0, a fast transient to ~1.10 by step 4, a plateau (drifting down 0.01, with a small fixed
    wiggle) to EXIT, a fall of `fall`, linear in log-step, to step 450, then flat: the issue's run, whose first
    drop (to 1.14 at step 2) is steeper per log-step than its transition."""
    out = []
    for i, s in enumerate(STEPS):
        if s <= 4:
            v = [1.40, 1.35, 1.14, 1.11, 1.10][s]  # (1.35 -> 1.14 at step 2: per log-step, faster than the transition)
        elif s <= EXIT:
            v = 1.10 - 0.01 * math.log(s / 4) / math.log(EXIT / 4)
        elif s <= 450:
            v = 1.09 - fall * math.log(s / EXIT) / math.log(450 / EXIT)
        else:
            v = 1.09 - fall
        out.append(v + 0.002 * (-1) ** i)
    return out


def _headline_step(line: str, words: str) -> int:
    return int(line.split(words)[1].split()[0].rstrip(","))


def test_a_planted_plateau_exit_is_found_where_the_change_points_are():
    loss = _planted()
    assert steepest_drop(STEPS, loss) == 2  # the old headline: the transient
    found = stages.change_points(STEPS, loss)
    exit, fastest = loss_transition(STEPS, loss)
    assert exit in found and EXIT <= exit <= 1.25 * EXIT, (exit, found)  # the change points' resolution
    assert fastest is not None and EXIT < fastest <= 450
    line = drop_line(Timeline(STEPS, loss, loss_drop_step=fastest))
    assert _headline_step(line, "falls fastest at step ") == fastest
    assert _headline_step(line, "leaving its plateau at step ") == exit
    assert line.endswith(f"(loss change points: {', '.join(map(str, found))})"), line


def test_a_loss_without_a_plateau_gets_no_invented_transition():
    falls_then_flattens = [0.9 + 0.5 / (1 + s / 3) for s in STEPS]
    straight = [2.0 - 0.1 * math.log1p(s) for s in STEPS]  # one line in log-step: no change point at all
    noisy_flat = [1.40, 1.20] + [1.10 + 0.004 * math.sin(3 * i) for i in range(len(STEPS) - 2)]
    for loss in (falls_then_flattens, straight, noisy_flat):
        exit, fastest = loss_transition(STEPS, loss)
        assert exit is None, (exit, loss)
        line = drop_line(Timeline(STEPS, loss, loss_drop_step=fastest))
        assert "plateau to leave" in line and "leaving" not in line and "None" not in line, line
        found = stages.change_points(STEPS, loss)
        assert not found or fastest <= found[0] * 1.5, (fastest, found)  # the fall it names is the first one


# The demo config's held-out loss, recorded (its first 400 steps, 40 checkpoints; `mechsynth demo` trains 2000):
# it falls fastest per log-step at step 2, from the initialisation; the transition is near 200-250.
DEMO = [
    (0, 1.242),
    (1, 1.151),
    (2, 1.089),
    (3, 1.054),
    (4, 1.043),
    (5, 1.043),
    (7, 1.036),
    (9, 1.032),
    (12, 1.024),
    (17, 1.021),
    (21, 1.017),
    (23, 1.017),
    (32, 1.013),
    (42, 1.01),
    (44, 1.009),
    (60, 1.007),
    (63, 1.006),
    (83, 1.004),
    (84, 1.004),
    (105, 1.01),
    (113, 1.004),
    (126, 0.999),
    (147, 0.994),
    (155, 0.989),
    (168, 0.98),
    (189, 0.958),
    (211, 0.941),
    (213, 0.941),
    (232, 0.934),
    (253, 0.921),
    (274, 0.916),
    (292, 0.911),
    (295, 0.914),
    (316, 0.91),
    (337, 0.908),
    (358, 0.906),
    (379, 0.905),
    (400, 0.906),
]


def test_the_demo_curve_headline_points_at_its_transition():
    steps, loss = [s for s, _ in DEMO], [v for _, v in DEMO]
    found = stages.change_points(steps, loss)
    exit, fastest = loss_transition(steps, loss)
    assert exit in found and 100 <= exit <= 200 and 200 <= fastest <= 300, (exit, fastest, found)
    assert drop_line(Timeline(steps, loss, loss_drop_step=fastest)).startswith(
        f"loss falls fastest at step {fastest}, after leaving its plateau at step {exit}"
    )


def test_a_monitor_run_headline_points_where_its_change_points_are(tmp_path):
    # the own-loop tutorial's loop, on mechsynth's fused model (fast on a CPU), with one cheap probe
    task = mechsynth.tasks.make("markov_icl", {"k": 3, "order": 2, "length": 32})
    torch.manual_seed(0)
    model = models.build(models.TransformerConfig(n_layers=2, n_heads=1, d_model=16, attn_only=True), task.spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(0)
    with mechsynth.Monitor(
        model, tmp_path / "run", task, steps=300, checkpoints=30, probes=["previous_token"]
    ) as monitor:
        for step in range(1, 301):
            batch = task.sample(64, data)
            logits = model(batch.tokens)
            loss = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(step, loss)
    tl = monitor.timeline
    found = stages.change_points(tl.steps, tl.loss)
    line = timeline.summary(tl, task)[0]
    exit, fastest = loss_transition(tl.steps, tl.loss)
    assert exit in found and fastest == tl.loss_drop_step and fastest >= exit, (line, found)
    assert line.startswith(f"loss falls fastest at step {fastest}, after leaving its plateau at step {exit}"), line
    assert timeline.as_json(timeline.load(tmp_path / "run"))["plateau_exit"] == exit


def test_a_run_without_a_plateau_says_so(tmp_path, tiny):
    # 1 layer on in-context bigrams: it learns the unigram stage from the first steps and cannot go on to bigrams
    data = tiny(
        {"name": "markov_icl", "k": 3, "order": 2, "length": 32},
        {"n_layers": 1, "attn_only": True},
        {"steps": 150, "checkpoints": 30, "batch_size": 32, "lr": 1e-2, "eval_every": 10},
    )
    run = load_run(train_run(parse_config(data), tmp_path / "run", progress=False))
    tl = timeline.probe_run(run, [], batch_size=16)
    found = stages.change_points(tl.steps, tl.loss)
    line = timeline.summary(tl, run.task)[0]
    assert stages.plateau_exit(tl.steps, tl.loss) is None and "no plateau to leave" in line, line
    assert found and tl.loss_drop_step <= found[0], (line, found)
