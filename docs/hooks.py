"""The docs' generated pages: the reference from the registries and one page per experiment from its JSON.

A mkdocs hook rather than mkdocs-gen-files: mkdocs 1.6 adds generated files itself, so there is one plugin less
to install and pin. The listings come from what `mechsynth tasks --json` / `mechsynth probes --json` print and from
the helpers they use; the results from experiments/results_table.py, the README's renderer.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File

from experiments import harness, results_table, verdicts  # (`python -m mkdocs` from the checkout's root: `make docs`)

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
# Written text for an experiment's page, docs/experiments/differences/<name>.md: where its setup differs from the
# paper's, its definitions and its --full size (excluded from the pages in mkdocs.yml; put in here).
DIFFERENCES = Path(__file__).resolve().parent / "experiments" / "differences"

EXPERIMENTS: list[dict[str, Any]] = []  # the JSONs that have rules, in the README's order (set in on_config)


def md(text: Any) -> str:
    """Plain text as one line of Markdown: `*`, `_`, brackets and `<` outside code spans are shown, not read as
    emphasis, links or HTML (help strings hold `2**16` and `<run>`); pipes are escaped for tables."""
    parts = str(text).replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([\\*_\[\]])", r"\\\1", parts[i]).replace("<", "&lt;").replace("|", "\\|")
    return "`".join(parts)


def fields(params: list[dict[str, Any]]) -> str:
    if not params:
        return "No fields of its own."
    rows = ["| field | type | default | meaning [bounds] |", "|---|---|---|---|"]
    for p in params:
        default = repr(p["default"])
        default = f"`{default}`" if "|" not in default and "`" not in default else md(default)
        rows.append(f"| `{p['name']}` | {md(p['type'])} | {default} | {md(p['help'])} |")
    return "\n".join(rows)


def listing(command: str) -> dict[str, dict[str, Any]]:
    """What `mechsynth COMMAND --json` prints, from the CLI itself, so the docs and the terminal agree."""
    from mechsynth import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main([command, "--json"]) == 0
    return json.loads(out.getvalue())


def tasks_page() -> str:
    lines = [
        "# Tasks",
        "",
        "Generated from the task registry: what `mechsynth tasks` prints. Set them under `[task]` "
        "(`name` and the fields below) or with `--set task.FIELD=VALUE`.",
        "",
    ]
    for name, info in listing("tasks").items():
        lines += [f"## `{name}`", "", md(info["doc"]), ""]
        if info.get("latents"):  # what the latents and dictionary probes look for
            lines += ["Latent variables, with the default config:", ""]
            lines += [
                f"- `{v['name']}` ({md(v['kind'])}, defined at: {md(v['where'])}): {md(v['about'])}"
                for v in info["latents"]
            ]
            lines += [""]
        lines += [fields(info["params"]), ""]
    return "\n".join(lines)


def probes_page() -> str:
    lines = [
        "# Probes",
        "",
        "Generated from the probe registry: what `mechsynth probes` prints. Options are set with "
        "`mechsynth probe RUN --set PROBE.OPTION=VALUE`.",
        "",
    ]
    for name, info in listing("probes").items():
        truth = ", ".join(f"`{t}`" for t in info["truth"]) or "none"
        lines += [
            f"## `{name}`",
            "",
            md(info["doc"]),
            "",
            f"- task truth it reads: {truth}",
            f"- runs: {'only when named (`--probes`)' if info['costly'] else 'on every checkpoint, wherever it applies'}",
            "",
            fields(info["params"]),
            "",
        ]
    return "\n".join(lines)


def models_page() -> str:
    from mechsynth import cli, models
    from mechsynth.config import describe

    lines = [
        "# Model kinds",
        "",
        f"Generated from the model registry. `[model] kind` picks one (default "
        f"`{models.DEFAULT_KIND}`); each kind accepts only its own fields. Vocabulary, context and output sizes "
        "come from the task.",
        "",
    ]
    for name in models.names():
        kind = models.MODEL_KINDS.get(name)
        lines += [f"## `{name}`", "", md(cli._first_line(kind)), "", fields(describe(kind)), ""]
    return "\n".join(lines)


def optimizers_page() -> str:
    from mechsynth import cli, optimizers
    from mechsynth.config import describe
    from mechsynth.optimizers.base import Hyper
    from mechsynth.runs.wandb_log import WandbConfig
    from mechsynth.training.train import TrainConfig

    train = describe(TrainConfig)
    lines = [
        "# Optimizers and training",
        "",
        "Generated from the optimizer registry and the `[train]` and `[wandb]` "
        "configs. `[train] optimizer` names an optimizer; an elementwise one is required for `train.seeds` > 1.",
        "",
        "| optimizer | elementwise | what |",
        "|---|---|---|",
    ]
    lines += [
        f"| `{n}` | {'yes' if optimizers.get(n).elementwise else 'no'} | {md(cli._first_line(optimizers.get(n)))} |"
        for n in optimizers.names()
    ]
    lines += [
        "",
        "## The `[train]` fields an optimizer reads",
        "",
        fields([p for p in train if p["name"] in Hyper.__annotations__]),
        "",
        "## `[train]`",
        "",
        fields(train),
        "",
        "## `[wandb]`",
        "",
        fields(describe(WandbConfig)),
        "",
    ]
    return "\n".join(lines)


def setup(name: str) -> str:
    """The experiment script's docstring: what it runs, at each size."""
    path = ROOT / "experiments" / f"{name}.py"
    return (ast.get_docstring(ast.parse(path.read_text())) or "") if path.exists() else ""


# A number a written page takes from its experiment's JSON: {{ results.steps.mezo }}, {{ runs.seeds }}.
VALUE = re.compile(r"\{\{\s*([\w.\-]+)\s*\}\}")


def value(out: dict[str, Any], path: str) -> str:
    """The JSON's value at a dotted path (a list index is a number), as the rules' why lines write numbers: a
    list of numbers as its range. A path the JSON lacks fails the docs build, naming it."""
    at: Any = out
    for key in path.split("."):
        try:
            at = at[int(key)] if isinstance(at, list) else at[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ValueError(
                f"docs/experiments/differences/{out['experiment']}.md: {{{{ {path} }}}} is not in "
                f"assets/{out['experiment']}.json"
            ) from None
    if isinstance(at, list) and all(isinstance(x, (int, float)) for x in at):
        return verdicts.span(at)
    return verdicts.num(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else str(at)


def filled(text: str, out: dict[str, Any]) -> str:
    return VALUE.sub(lambda m: value(out, m.group(1)), text)


def experiment_page(out: dict[str, Any]) -> str:
    name = out["experiment"]
    judged, _ = results_table.claims(out)
    lines = [
        f"# {name}",
        "",
        "## Setup",
        "",
        "What the script runs (its docstring); the paper's setting is beside each claim below.",
        "",
        "```text",
        setup(name),
        "```",
        "",
    ]
    written = DIFFERENCES / f"{name}.md"
    if written.exists():
        lines += ["## Where we differ from the paper", "", filled(written.read_text().strip(), out), ""]
    lines += ["## Claims and the rules that judge them", ""]
    for c in judged:
        control = c.get("control") or {}
        lines += [
            f"- **{md(c['claim'])}**  ",
            f"  Paper: {md(c['paper'])}  ",
            f"  Rule: {md(c['rule'])}  ",
            f"  Negative control: {md(control.get('note') or 'none')}  ",
            f"  Verdict: **{c['verdict']}**",
        ]
    lines += [
        "",
        "## Results",
        "",
        "Generated from `assets/" + name + ".json` by `experiments/results_table.py`, which "
        'writes the README\'s shorter table from the same JSON; "ours" is the line the rule wrote from the data.',
        "",
        results_table.table([out]),
        "",
    ]
    module = verdicts.rules_of(name)
    if hasattr(module, "tables"):
        lines += [module.tables(out["results"]), ""]
    figures = [f for f in out.get("figures", []) if (ASSETS / f).exists()]
    if figures:
        lines += ["## Figures", ""] + [f"![{f}](../assets/{f})\n" for f in figures]
    command = harness.command(name, "cpu")
    lines += [
        "## Commands",
        "",
        "```bash",
        f"{harness.command(name, out['size'])}            # the size these results are from ({out['size']})",
        f"{command} --smoke    # seconds: the test suite runs each script at this size",
        f"{command} --full     # larger, longer, more seeds",
        "```",
        "",
        "## Cost",
        "",
        md(results_table.when(out)),
        "",
        full_cost(name),
        "",
        "## Made from",
        "",
        results_table.made_from(out),
        "",
    ]
    return "\n".join(lines)


def _hours(h: float) -> str:
    return f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h" if h < 100 else f"{h:,.0f} h"


def _measured() -> dict[str, Any]:
    """assets/full_cost.json (experiments/full_cost.py): per device kind, what each experiment's --full costs."""
    path = ASSETS / "full_cost.json"
    return json.loads(path.read_text()) if path.exists() else {}


def full_cost(name: str) -> str:
    """What `--full` costs, on each device it was measured on."""
    measured = _measured()
    said = []
    for kind, where in (("cpu", "one CPU core"), ("cuda", "one GPU")):
        entry = measured.get(kind, {})
        e = entry.get("experiments", {}).get(name)
        if e is None:
            continue
        if e["hours"] is None:
            said.append(f"on {where} ({md(entry['device'])}) it does not fit: {md(e['does_not_fit'])}")
            continue
        scaled = (
            f"{e['configs_timed']} configurations"
            if e["configs_timed"] == e["configs"]
            else f"{e['configs_timed']} of its {e['configs']} configurations (the rest scaled by parameters × tokens)"
        )
        said.append(
            f"**{_hours(e['hours'])}** of training on {where} ({md(entry['device'])}; its longest run "
            f"{_hours(e['longest_run_hours'])}; {scaled} timed at their full size, {entry['steps']} steps each "
            f"after {entry['warmup']} of warm-up, at load {e['load_average']:.1f}, commit {e.get('commit', entry['commit'])})"
        )
    if not said:
        return f"`--full`: its cost is not measured yet (`python -m experiments.full_cost --only {name}`)."
    first = measured.get("cpu", measured.get("cuda"))["experiments"][name]
    gpu = (
        ""
        if "cuda" in measured and name in measured["cuda"].get("experiments", {})
        else (" On a GPU: not measured yet; `python -m experiments.full_cost --device cuda` on one measures it.")
    )
    return (
        f"`--full` trains {first['runs']} runs in its first round ({first['model_steps']:,} model-steps; the largest "
        f"needs about {first['peak_gib']:.1f} GiB by the memory estimate), one at a time, checkpoints and probing "
        f"not counted: " + "; ".join(said) + f".{gpu} Across several GPUs, a run on "
        f"each (Ray): `python experiments/{name}.py --full --device cuda --backend ray --address auto`."
    )


def experiments_list() -> str:
    rows = ["| experiment | claims | verdicts |", "|---|---|---|"]
    for out in EXPERIMENTS:
        judged, before = results_table.claims(out)
        said = ", ".join(f"{n} {v}" for v, n in verdicts.counts(judged).items() if n) + (
            "" if before else " (post hoc)"
        )
        rows.append(f"| [{out['experiment']}]({out['experiment']}.md) | {len(judged)} | {said} |")
    return "\n".join(rows)


def _cell(e: Any, absent: str) -> str:
    return absent if e is None else "does not fit in memory" if e["hours"] is None else _hours(e["hours"])


def full_cost_table() -> str:
    measured = _measured()
    cpu, cuda = (measured.get(k, {}).get("experiments", {}) for k in ("cpu", "cuda"))
    if not cpu and not cuda:
        return "Not measured yet: `python -m experiments.full_cost` measures it."
    rows = ["| experiment | runs (first round) | training on one CPU core | on one GPU |", "|---|---|---|---|"]
    for name in sorted(set(cpu) | set(cuda)):
        e = cpu.get(name) or cuda[name]
        rows.append(
            f"| [{name}]({name}.md) | {e['runs']} | {_cell(cpu.get(name), 'not measured')} "
            f"| {_cell(cuda.get(name), 'not measured yet')} |"
        )
    return "\n".join(rows)


# Written pages carry these markers where generated text goes.
MARKERS = {
    "<!-- generated: demo -->": lambda: results_table.demo(ASSETS),
    "<!-- generated: experiments -->": experiments_list,
    "<!-- generated: full_cost -->": full_cost_table,
}


def on_config(config):
    EXPERIMENTS[:] = results_table.experiments(ASSETS)
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Experiments" in entry:
            entry["Experiments"] = entry["Experiments"][:1] + [
                {o["experiment"]: f"experiments/{o['experiment']}.md"} for o in EXPERIMENTS
            ]
    return config


def on_files(files, config):
    pages = {
        "reference/tasks.md": tasks_page(),
        "reference/probes.md": probes_page(),
        "reference/models.md": models_page(),
        "reference/optimizers.md": optimizers_page(),
    }
    pages.update({f"experiments/{o['experiment']}.md": experiment_page(o) for o in EXPERIMENTS})
    for src, text in pages.items():
        files.append(File.generated(config, src, content=text))
    for png in sorted(ASSETS.glob("*.png")):
        files.append(File.generated(config, f"assets/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
