"""The one module that imports wandb. Offline by default; if W&B cannot start, training goes on."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from mechsynth.config import doc


@dataclass(frozen=True)
class WandbConfig:
    mode: Literal["online", "offline", "disabled"] = doc("offline needs no account or network; `wandb sync` uploads later", "offline")
    project: str = doc("W&B project", "mechsynth")
    name: Optional[str] = doc("run name; unset = the run directory's name", None)
    group: Optional[str] = doc("W&B group (seeds and sweeps share one)", None)
    tags: tuple[str, ...] = doc("W&B tags", ())
    log_checkpoints: bool = doc("also save every checkpoint as a W&B model artifact (copies its files into the W&B run)", False)


class WandbLogger:
    """Logs to a W&B run, or does nothing (with one warning) when W&B is disabled or fails to start."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], run_id: Optional[str] = None):
        self.run = None
        if cfg.mode == "disabled":
            return
        try:
            import wandb

            self.run = wandb.init(mode=cfg.mode, project=cfg.project, name=cfg.name or Path(run_dir).name,
                                  group=cfg.group, tags=list(cfg.tags), config=config, dir=str(run_dir),
                                  id=run_id, resume="allow" if run_id else None,
                                  # each logger owns its own run: seeds side by side log S runs at once
                                  reinit="create_new",
                                  settings=wandb.Settings(console="off", silent=True))
        except Exception as e:  # noqa: BLE001 - any failure to start must not stop training
            warnings.warn(f"W&B did not start ({type(e).__name__}: {e}); metrics still go to metrics.jsonl",
                          stacklevel=2)
            self.run = None

    @property
    def id(self) -> Optional[str]:
        return self.run.id if self.run is not None else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run is not None:  # scalars only: lists (e.g. accuracy by position) stay in metrics.jsonl
            self.run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def log_against(self, x_key: str, rows: list[dict[str, Any]]) -> None:
        """Log series against their own x axis (e.g. probe scores against training step, logged after
        training, when W&B's own step counter has moved past those steps)."""
        if self.run is None:
            return
        for key in {k for row in rows for k in row if k != x_key}:
            self.run.define_metric(key, step_metric=x_key)
        for row in rows:
            self.run.log(row)

    def html(self, key: str, page: str) -> None:
        """A self-contained HTML page as media. `inject=False`: W&B's default adds a stylesheet link
        to its web site, which would make the page ask the network for something."""
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Html(page, inject=False, data_is_not_path=True)})

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A table in the run; past W&B's row limit for run tables, as an artifact (which allows 20x more)."""
        if self.run is None:
            return
        import wandb

        table = wandb.Table(columns=columns, data=rows)
        if len(rows) <= wandb.Table.MAX_ROWS:
            self.run.log({key: table})
        else:
            artifact = wandb.Artifact(f"{key.replace('/', '-')}-{self.run.id}", type="table")
            artifact.add(table, key.split("/")[-1])
            self.run.log_artifact(artifact)

    def line_series(self, key: str, xs: list[float], series: dict[str, list[float]], title: str, x_name: str) -> None:
        """One line plot with a line per series (e.g. every head's probe score against training step)."""
        if self.run is not None and series:
            import wandb

            names = list(series)
            self.run.log({key: wandb.plot.line_series(xs=xs, ys=[series[n] for n in names], keys=names, title=title,
                                                      xname=x_name)})

    def checkpoint(self, path: Path, step: int) -> None:
        """A checkpoint directory as a new version of this run's model artifact, aliased `step-<step>`."""
        if self.run is not None:
            import wandb

            artifact = wandb.Artifact(f"checkpoints-{self.run.id}", type="model", metadata={"step": step})
            artifact.add_dir(str(path))
            self.run.log_artifact(artifact, aliases=[f"step-{step}", "latest"])

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
