"""W&B, offline: the run is real and readable; a failure to start never stops training; which mode a run
uses (--wandb > config > WANDB_MODE > offline); online with no reachable server costs init_timeout, not 90 s."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mechsynth import load_run, parse_config, train_run


def inspect(wandb_file: Path) -> dict:
    wandb_bin = shutil.which("wandb") or str(Path(sys.executable).parent / "wandb")
    out = subprocess.run(
        [wandb_bin, "leet", "inspect", "--summary", "--json", str(wandb_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def test_offline_run_records_config_and_metrics_and_resumes_same_run(tmp_path, tiny):
    cfg = parse_config(
        tiny({"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline", train={"steps": 10, "eval_every": 5}) | {}
    )
    cfg = parse_config({**cfg.to_dict(), "wandb": {"mode": "offline", "group": "g1", "project": "mechsynth-tests"}})
    run_dir = train_run(cfg, tmp_path / "run", progress=False)
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    summary = inspect(files[0])
    assert summary["state"] == "finished" and summary["project"] == "mechsynth-tests"
    assert summary["config"]["task"]["name"] == "sparse_parity"
    last = load_run(run_dir).metrics[-1]
    assert summary["summary"]["eval/acc"] == pytest.approx(last["eval/acc"])
    run_id = summary["run_id"]

    resumed = parse_config({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "steps": 15}})
    train_run(resumed, run_dir, resume=True, progress=False)
    ids = {inspect(f)["run_id"] for f in (run_dir / "wandb").glob("offline-run-*/run-*.wandb")}
    assert ids == {run_id}, "a resumed run continues the same W&B run"


def test_wandb_failure_warns_once_and_training_goes_on(tmp_path, tiny, monkeypatch):
    import wandb

    def broken(*a, **k):
        raise RuntimeError("no service")

    monkeypatch.setattr(wandb, "init", broken)
    cfg = parse_config(tiny({"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline"))
    with pytest.warns(UserWarning, match="W&B did not start") as record:
        run_dir = train_run(cfg, tmp_path / "run", progress=False)
    assert len([w for w in record if "W&B" in str(w.message)]) == 1
    assert load_run(run_dir).metrics[-1]["step"] == 20


def test_seeds_side_by_side_log_one_wandb_run_each_in_one_group(tmp_path, tiny):
    cfg = parse_config(
        tiny(
            {"name": "sparse_parity", "n": 6, "k": 2}, wandb="offline", train={"steps": 10, "eval_every": 5, "seeds": 2}
        )
    )
    run_dir = train_run(cfg, tmp_path / "batch", progress=False)
    summaries = []
    for i in range(2):
        files = sorted((run_dir / f"seed_{i}" / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(files) == 1, "each seed's W&B run lives in its own run directory"
        s = inspect(files[0])
        assert s["state"] == "finished" and s["name"] == f"batch-seed_{i}"
        assert s["config"]["wandb"]["group"] == "batch" and s["config"]["train"]["seed"] == i
        assert s["summary"]["eval/acc"] == pytest.approx(load_run(run_dir / f"seed_{i}").metrics[-1]["eval/acc"])
        summaries.append(s)
    ids = [s["run_id"] for s in summaries]
    assert len(set(ids)) == 2

    resumed = parse_config({**cfg.to_dict(), "train": {**cfg.to_dict()["train"], "steps": 15}})
    train_run(resumed, run_dir, resume=True, progress=False)
    for i in range(2):
        after = {inspect(f)["run_id"] for f in (run_dir / f"seed_{i}" / "wandb").glob("offline-run-*/run-*.wandb")}
        assert after == {ids[i]}, "a resumed batch continues each seed's W&B run"


# --- which mode: --wandb flag > config file > WANDB_MODE > offline -------------------------------------------

MODE_TABLE = [  # (flag, file, WANDB_MODE, resolved)
    ("disabled", "online", "offline", "disabled"),  # the flag beats the file and the environment
    ("online", None, "disabled", "online"),
    (None, "disabled", "online", "disabled"),  # the file beats the environment
    (None, "offline", "not-a-mode", "offline"),  # ... which is then never read
    (None, None, "online", "online"),  # the environment, when the config does not say
    (None, None, "disabled", "disabled"),
    (None, None, "dryrun", "offline"),  # W&B's own spellings
    (None, None, "run", "online"),
    (None, None, " Offline ", "offline"),
    (None, None, "", "offline"),  # set but empty = unset
    (None, None, None, "offline"),  # nothing says: offline
]


@pytest.mark.parametrize("flag,file_mode,env,expected", MODE_TABLE)
def test_mode_precedence_flag_file_environment_offline(tmp_path, monkeypatch, flag, file_mode, env, expected):
    """Through the real CLI (argument parsing, the config file, --wandb), stopping where training would start."""
    import mechsynth.runs.runner
    from mechsynth.cli import main
    from mechsynth.runs.wandb_log import resolve_mode

    lines = ['[task]\nname = "sparse_parity"\nn = 6\nk = 2\n[train]\nsteps = 4\ndevice = "cpu"\n']
    if file_mode is not None:
        lines.append(f'[wandb]\nmode = "{file_mode}"\n')
    config = tmp_path / "c.toml"
    config.write_text("".join(lines))
    seen = []
    monkeypatch.setattr(mechsynth.runs.runner, "train_run", lambda cfg, run_dir, **kw: seen.append(cfg))  # cli's import
    if env is None:
        monkeypatch.delenv("WANDB_MODE", raising=False)
    else:
        monkeypatch.setenv("WANDB_MODE", env)
    assert main(["train", str(config), "--out", str(tmp_path / "run"), *(["--wandb", flag] if flag else [])]) == 0
    (cfg,) = seen
    assert cfg.wandb.mode == (flag or file_mode), "the config keeps what the user said (unset stays unset)"
    assert resolve_mode(cfg.wandb) == expected


@pytest.mark.parametrize("bad", ["bogus", "shared", "true", "0"])
def test_bad_wandb_mode_in_the_environment_is_a_config_error_naming_it(tmp_path, monkeypatch, bad):
    from mechsynth.errors import ConfigError
    from mechsynth.runs.wandb_log import WandbConfig, WandbLogger, resolve_mode

    monkeypatch.setenv("WANDB_MODE", bad)
    with pytest.raises(ConfigError) as err:
        resolve_mode(WandbConfig())
    assert err.value.field == "WANDB_MODE"
    assert str(err.value).startswith("WANDB_MODE: ") and "allowed: " in str(err.value) and "\n" not in str(err.value)
    assert repr(bad) in str(err.value)
    with pytest.raises(ConfigError, match="WANDB_MODE"):  # the logger resolves the same way: no silent fallback
        WandbLogger(WandbConfig(), tmp_path, {})
    assert resolve_mode(WandbConfig(mode="disabled")) == "disabled"  # a mode in the config never reads it


def test_wandb_config_validation():
    from mechsynth.config import from_dict
    from mechsynth.errors import ConfigError
    from mechsynth.runs.wandb_log import WandbConfig

    assert WandbConfig().mode is None and 0 < WandbConfig().init_timeout <= 10
    for kwargs, field in [
        ({"mode": "bogus"}, "mode"),
        ({"init_timeout": 0}, "init_timeout"),
        ({"init_timeout": -1.0}, "init_timeout"),
        ({"init_timeout": float("nan")}, "init_timeout"),
        ({"init_timeout": float("inf")}, "init_timeout"),
        ({"init_timeout": True}, "init_timeout"),
        ({"init_timeout": "5"}, "init_timeout"),
    ]:
        with pytest.raises(ConfigError) as err:
            WandbConfig(**kwargs)
        assert err.value.field == field, kwargs
    assert from_dict(WandbConfig, {"init_timeout": 2}, "wandb").init_timeout == 2.0  # as a TOML file gives it
    with pytest.raises(ConfigError) as err:
        from_dict(WandbConfig, {"init_timeout": -2}, "wandb")
    assert err.value.field == "wandb.init_timeout"
    with pytest.raises(ConfigError) as err:
        from_dict(WandbConfig, {"mode": "dryrun"}, "wandb")  # W&B's old spellings are for WANDB_MODE only
    assert err.value.field == "wandb.mode"


def test_log_drops_nan_inf_none_and_non_scalars(tmp_path):
    from mechsynth.runs.wandb_log import WandbConfig, WandbLogger

    class FakeRun:
        def __init__(self):
            self.logged = []

        def log(self, row, step=None):
            self.logged.append((row, step))

        def define_metric(self, *a, **k):
            pass

    logger = WandbLogger(WandbConfig(mode="disabled"), tmp_path, {})
    logger.run = FakeRun()
    logger.log(
        {
            "a": 1.5,
            "n": 3,
            "nan": float("nan"),
            "inf": float("inf"),
            "-inf": float("-inf"),
            "none": None,
            "list": [1.0, 2.0],
        },
        step=7,
    )
    logger.log_against("probe_step", [{"probe_step": 5, "s": 0.5, "gap": float("nan"), "none": None}])
    assert logger.run.logged == [({"a": 1.5, "n": 3}, 7), ({"probe_step": 5, "s": 0.5}, None)]


# --- online with no network: a short wait, one warning, training goes on -----------------------------------------

NO_NETWORK_SCRIPT = r"""
import json, sys, time, warnings
from mechsynth.cli import main
t0 = time.monotonic()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "seconds": time.monotonic() - t0, "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.slow
def test_online_without_a_reachable_server_waits_init_timeout_then_trains(tmp_path):
    """A server that accepts connections and never answers (what "no network" looks like behind a proxy or a
    firewall that drops packets). W&B's own wait is 90 s, and its error telemetry then waits 10 s more at exit;
    with init_timeout = 2 the whole process takes seconds. A regression hits `timeout=` instead of hanging."""
    import os
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, requests = [], []  # requests: "POST /graphql", ... as they arrive

    def read_request_line(conn):
        try:
            requests.append(" ".join(conn.recv(65536).split(b"\r\n", 1)[0].decode(errors="replace").split()[:2]))
        except OSError:
            pass

    def accept_and_never_answer():
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            held.append(conn)
            threading.Thread(target=read_request_line, args=(conn,), daemon=True).start()

    threading.Thread(target=accept_and_never_answer, daemon=True).start()
    config = tmp_path / "tiny.toml"
    config.write_text(
        '[task]\nname = "sparse_parity"\nn = 6\nk = 2\n'
        "[model]\nn_layers = 1\nn_heads = 1\nd_model = 16\n"
        "[train]\nsteps = 20\nbatch_size = 16\neval_every = 5\neval_batch_size = 64\ncheckpoints = 6\n"
        'device = "cpu"\n'
    )  # no [wandb] mode: WANDB_MODE=online below decides
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_ERROR_REPORTING", "WANDB_INIT_TIMEOUT")}
    env |= {
        "WANDB_MODE": "online",
        "WANDB_API_KEY": "0123456789abcdef" * 2 + "01234567",
        "WANDB_BASE_URL": f"http://127.0.0.1:{server.getsockname()[1]}",
        "HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]),
    }
    assert len(env["WANDB_API_KEY"]) == 40
    run_dir = tmp_path / "run"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                NO_NETWORK_SCRIPT,
                "train",
                str(config),
                "--out",
                str(run_dir),
                "--set",
                "wandb.init_timeout=2",
                "--no-progress",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.close()
        for c in held:
            c.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rc"] == 0, proc.stderr[-3000:]
    wandb_warnings = [w for w in result["warnings"] if "W&B" in w]
    assert len(wandb_warnings) == 1 and wandb_warnings[0].startswith("W&B did not start"), result["warnings"]
    assert "metrics.jsonl" in wandb_warnings[0] and "\n" not in wandb_warnings[0]
    run = load_run(run_dir)
    assert run.metrics[-1]["step"] == 20
    assert any(r.endswith("/graphql") for r in requests), requests  # W&B did try this server
    # ... and nothing else: W&B's error telemetry would post the failed start to it at exit and wait 10 s more
    assert not [r for r in requests if "/otel/" in r], requests
    assert run.config.wandb.mode is None, "the run keeps 'unset': a resume decides again from WANDB_MODE"


def test_a_monitor_runs_wandb_files_go_to_wandb_dir_and_mechsynths_own_runs_stay_in_theirs(tmp_path, monkeypatch):
    import mechsynth
    from mechsynth.cli import main
    from mechsynth.runs.wandb_log import wandb_dir

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_dir(tmp_path / "trained", yours=False) == tmp_path / "trained"  # documented: runs/<run>/wandb
    task = mechsynth.tasks.make("markov_icl", {"k": 3, "order": 2, "length": 16})
    model = mechsynth.hooked_model(
        n_layers=1,
        d_model=8,
        n_heads=1,
        d_head=8,
        n_ctx=task.spec.n_ctx,
        d_vocab=task.spec.d_vocab,
        act_fn="relu",
        attn_only=True,
    )
    with mechsynth.Monitor(model, tmp_path / "loop", task, schedule=[0, 1], probes=[]) as monitor:
        monitor.step(1, 1.0)
    assert main(["probe", str(tmp_path / "loop"), "--probes", "previous_token", "--wandb", "offline"]) == 0
    assert list((tmp_path / "mine" / "wandb").glob("offline-run-*/run-*.wandb")), "W&B's files are under WANDB_DIR"
    assert not (tmp_path / "loop" / "wandb").exists()


PARENT_WITH_A_SERVICE = """
import os, subprocess, sys, wandb
run = wandb.init(mode="offline", dir=sys.argv[1], settings=wandb.Settings(silent=True))
run.finish()  # W&B's service lives on, and WANDB_SERVICE (which children inherit) names it
assert os.environ.get("WANDB_SERVICE")
os.chdir(sys.argv[2])
subprocess.run([sys.executable, "-m", "mechsynth.cli", "train", "tiny.toml", "--out", "run", "--wandb", "offline",
                "--no-progress"], check=True)
"""


def test_a_run_started_under_another_processs_wandb_service_keeps_its_files_in_the_run(tmp_path):
    """A notebook or a test that ran wandb.init leaves WANDB_SERVICE set, and a mechsynth command it starts
    logs through that process's W&B service, whose working directory is not the command's: a relative --out
    must still put the W&B files in the run."""
    import os

    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "tiny.toml").write_text(
        '[task]\nname = "sparse_parity"\nn = 6\nk = 2\n[model]\nn_layers = 1\nn_heads = 1\nd_model = 16\n'
        '[train]\nsteps = 10\nbatch_size = 16\neval_every = 5\neval_batch_size = 64\ncheckpoints = 3\ndevice = "cpu"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-c", PARENT_WITH_A_SERVICE, str(tmp_path), str(tmp_path / "here")],
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=300,
        capture_output=True,
    )
    files = list((tmp_path / "here" / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and inspect(files[0])["state"] == "finished"
