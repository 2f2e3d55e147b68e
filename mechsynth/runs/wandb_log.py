"""The one module that imports wandb. Offline by default; if W&B cannot start, training goes on."""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, get_args

from mechsynth.config import check, check_fields, doc, show, validates_itself
from mechsynth.errors import ConfigError

Mode = Literal["online", "offline", "disabled"]
MODES: tuple[str, ...] = get_args(Mode)
# WANDB_MODE as W&B itself spells it: "dryrun" and "run" are its older names for offline and online.
_ENV_MODES = {"online": "online", "run": "online", "offline": "offline", "dryrun": "offline", "disabled": "disabled"}


@validates_itself
@dataclass(frozen=True)
class WandbConfig:
    mode: Optional[Mode] = doc(
        "offline needs no account or network (`wandb sync` uploads later); unset = WANDB_MODE from the "
        "environment, else offline (the --wandb flag overrides both)",
        None,
    )
    project: str = doc("W&B project", "mechsynth")
    name: Optional[str] = doc("run name; unset = the run directory's name", None)
    group: Optional[str] = doc("W&B group (seeds and sweeps share one)", None)
    tags: tuple[str, ...] = doc("W&B tags", ())
    log_checkpoints: bool = doc(
        "also save every checkpoint as a W&B model artifact (copies its files into the W&B run)", False
    )
    init_timeout: float = doc(
        "seconds to wait for the W&B server when a run starts (mode online); when it expires: one warning, "
        "and training goes on without W&B, its metrics still in metrics.jsonl (offline waits up to 90 s, W&B's default, "
        "for its local service)",
        5.0,
    )

    def __post_init__(self) -> None:
        check_fields(self)
        check(
            self.mode is None or (isinstance(self.mode, str) and self.mode in MODES),
            "mode",
            f"{show(self.mode)} is not allowed; allowed: {', '.join(map(repr, MODES))}, or unset (WANDB_MODE, "
            "else offline)",
        )
        t = self.init_timeout  # (the range test also rejects nan and inf, and never converts a huge int)
        check(
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t <= 3600,
            "init_timeout",
            f"{show(t)} is not allowed; allowed: a number of seconds > 0 and <= 3600",
        )


def resolve_mode(cfg: WandbConfig) -> str:
    """The W&B mode a run uses: the config's (where the --wandb flag also lands), else WANDB_MODE from
    the environment (W&B's own spellings: "dryrun" = offline, "run" = online), else offline.
    Raises ConfigError("WANDB_MODE", ...) for any other value of WANDB_MODE."""
    if cfg.mode is not None:
        return cfg.mode
    raw = os.environ.get("WANDB_MODE", "")
    if not raw.strip():
        return "offline"
    mode = _ENV_MODES.get(raw.strip().lower())
    if mode is None:
        raise ConfigError(
            "WANDB_MODE", f"{show(raw)} is not allowed; allowed: {', '.join(_ENV_MODES)}, or unset (= offline)"
        )
    return mode


def wandb_dir(run_dir: Path, yours: bool) -> Path:
    """Where a run's W&B files go. A run mechsynth trained keeps them in its directory (`runs/<run>/wandb`, beside
    its checkpoints). A Monitor's run logs into your W&B run (its id is in the run), which W&B put under
    WANDB_DIR when you started it: resumed later (`mechsynth probe/report --wandb ...`), it goes there too."""
    env = os.environ.get("WANDB_DIR", "").strip()
    # absolute: W&B's service process may be another's (a parent that set WANDB_SERVICE, e.g. a notebook that
    # ran wandb.init), and it would read a relative path from its own working directory
    return (Path(env) if yours and env else Path(run_dir)).resolve()


def _missing(v: Any) -> bool:
    """None, NaN or inf: W&B would chart them as gaps or spikes, or reject them; they stay in metrics.jsonl."""
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def _loggable(v: Any) -> bool:
    """A finite int or float (bools are ints to W&B too)."""
    return isinstance(v, (int, float)) and not _missing(v)


class WandbLogger:
    """Logs to a W&B run, or does nothing (with one warning) when W&B is disabled or fails to start."""

    def __init__(
        self, cfg: WandbConfig, run_dir: Path, config: dict[str, Any], run_id: Optional[str] = None, yours: bool = False
    ):
        """`yours`: a run mechsynth did not train (a Monitor's, an import), whose W&B files go where W&B puts
        your own (`wandb_dir`)."""
        self.run, self.owned = None, True
        mode = resolve_mode(cfg)  # a bad WANDB_MODE is the user's to fix: ConfigError, not a warning
        if mode == "disabled":
            return
        # W&B's own error telemetry (to W&B, not your runs): after a failed start it posts the error to
        # the same unreachable server at exit, which then waits 10-12 s more for a server that never
        # answers. Off, unless WANDB_ERROR_REPORTING is set; read when W&B starts its service process.
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        try:
            import wandb

            self.run = wandb.init(
                mode=mode,
                project=cfg.project,
                name=cfg.name or Path(run_dir).name,
                group=cfg.group,
                tags=list(cfg.tags),
                config=config,
                dir=str(wandb_dir(run_dir, yours)),
                id=run_id,
                resume="allow" if run_id else None,
                # each logger owns its own run: seeds side by side log S runs at once
                reinit="create_new",
                # init_timeout bounds wandb.init's wait for the server (default
                # 90 s); past it W&B raises, and the except below warns and goes on.
                # Offline there is no server, only W&B's own service process, which a
                # busy machine can take more than the online default's 5 s to start.
                settings=wandb.Settings(
                    console="off",
                    silent=True,
                    init_timeout=float(cfg.init_timeout if mode == "online" else max(cfg.init_timeout, 90)),
                ),
            )
        except Exception as e:  # noqa: BLE001 - any failure to start must not stop training
            # one line: W&B's own text goes on with advice for wandb.init callers, not for our config
            why = (str(e).strip().splitlines() or [""])[0]
            hint = (
                f"; a slow server may need more than [wandb] init_timeout = {cfg.init_timeout:g} s"
                if "timed out" in str(e).lower() or isinstance(e, TimeoutError)
                else ""
            )
            warnings.warn(
                f"W&B did not start ({type(e).__name__}: {why}); metrics still go to metrics.jsonl{hint}", stacklevel=2
            )
            self.run = None

    @classmethod
    def attach(cls, run: Any) -> "WandbLogger":
        """A logger into a W&B run you started (`wandb.init(...)`): it logs there and leaves finishing it to you."""
        logger = cls.__new__(cls)
        logger.run, logger.owned = run, False
        return logger

    @property
    def id(self) -> Optional[str]:
        return self.run.id if self.run is not None else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        # finite scalars only: lists (e.g. accuracy by position), NaN, inf and None stay in metrics.jsonl
        if self.run is not None:
            self.run.log({k: v for k, v in metrics.items() if _loggable(v)}, step=step)

    def log_against(self, x_key: str, rows: list[dict[str, Any]]) -> None:
        """Log series against their own x axis (e.g. probe scores against training step, logged after
        training, when W&B's own step counter has moved past those steps)."""
        if self.run is None:
            return
        for key in {k for row in rows for k in row if k != x_key}:
            self.run.define_metric(key, step_metric=x_key)
        for row in rows:
            self.run.log({k: v for k, v in row.items() if k == x_key or not _missing(v)})

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
            self.run.log(
                {
                    key: wandb.plot.line_series(
                        xs=xs, ys=[series[n] for n in names], keys=names, title=title, xname=x_name
                    )
                }
            )

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
        if self.run is not None and self.owned:
            self.run.finish()
        self.run = None
