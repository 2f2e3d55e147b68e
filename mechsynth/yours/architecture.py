"""The architecture of imported weights: TransformerConfig fields read off a state dict's shapes, checked against
what is declared (a TransformerLens config, --set), with where each field came from and what was guessed.

A module of its own, apart from `importing` (which reads the files and writes the run), because it alone decides
what model a set of weights is: a declaration the shapes contradict is refused, never loaded as another model.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from torch import Tensor

from mechsynth.config import check, show
from mechsynth.errors import ConfigError, CorruptFileError, RunFileError
from mechsynth.models import external
from mechsynth.models.tl_compat import BUFFERS, from_bridge_layout
from mechsynth.runs import io

FIELD = "checkpoints"  # how errors name the sources

# Where an architecture field came from, as the summary and the run's origin name it.
WEIGHTS, SAVED, TL_CONFIG, GIVEN = (
    "the weights' shapes",
    "the checkpoint's stored architecture",
    "the TransformerLens config",
    "--set",
)


@dataclass
class Found:
    """TransformerConfig fields of an import, where each came from, and which are guesses (field -> why)."""

    fields: dict[str, Any]
    source: dict[str, str] = field(default_factory=dict)
    guessed: dict[str, str] = field(default_factory=dict)


def hooked_layout(sd: dict[str, Tensor], n_heads: Optional[int] = None) -> dict[str, Tensor]:
    """A state dict in HookedTransformer's layout, whichever of the two TransformerLens layouts it is in (a
    TransformerBridge's fuses the heads, so it needs `n_heads`)."""
    if "embed.W_E" in sd:
        return {k: v for k, v in sd.items() if not k.endswith(BUFFERS)}
    if "embed.weight" in sd:
        if n_heads is None:
            raise ConfigError(
                "model.n_heads",
                "missing: a TransformerBridge state dict fuses the heads, so its weights do "
                "not say how many there are; give them (--set model.n_heads=N), or the "
                "model's config (--tl-config FILE), or save with mechsynth.save_checkpoint",
            )
        return from_bridge_layout(sd, n_heads)
    raise ConfigError(
        FIELD,
        f"weights in an unknown layout (first keys: {', '.join(list(sd)[:3])}); allowed: "
        "HookedTransformer's (embed.W_E, ...), TransformerBridge's (embed.weight, ...), nanoGPT's",
    )


def bridge_heads(sd: dict[str, Tensor], declared: dict[str, Any], source: dict[str, str]) -> Optional[int]:
    """The head count that splits a TransformerBridge state dict's fused q rows (n_heads × d_head): declared, or
    rows / d_head where d_head is declared; checked against the rows whenever d_head is known. None: no bridge
    layout, or nothing declared (hooked_layout asks)."""
    q = sd.get("blocks.0.attn.q.weight")
    if "embed.W_E" in sd or q is None:
        return None
    rows = q.shape[0]
    n_heads, d_head = declared.get("n_heads"), declared.get("d_head")
    if d_head is not None and (rows % d_head or (n_heads is not None and n_heads * d_head != rows)):
        said = f"n_heads {n_heads} × d_head {d_head}" if n_heads is not None else f"d_head {d_head}"
        raise ConfigError(
            "model.n_heads" if n_heads is not None else "model.d_head",
            f"{said} (from {source.get('n_heads', source['d_head'])}) does not fit blocks.0.attn.q.weight, "
            f"{external.shape_text(q)} in the checkpoint (its {rows} rows are n_heads × d_head); "
            f"{_fix('n_heads', rows // d_head, source) if rows % d_head == 0 else 'give the right d_head'}",
        )
    if n_heads is None and d_head is not None:
        return rows // d_head
    if n_heads is not None and rows % n_heads:
        raise ConfigError(
            "model.n_heads",
            f"{n_heads} (from {source['n_heads']}) does not divide the {rows} rows of "
            f"blocks.0.attn.q.weight ({external.shape_text(q)}: n_heads × d_head); give the model's head count",
        )
    return n_heads


def _fix(key: str, value: Any, source: dict[str, str]) -> str:
    """The flag that makes `key` what the weights say."""
    if source.get(key) == GIVEN:
        return f"give --set model.{key}={value} (or leave it out: the weights say it)"
    return f"{source.get(key, 'it')} does not describe these weights: give the config of the model that saved them"


def shapes(sd: dict[str, Tensor]) -> tuple[dict[str, Any], dict[str, str]]:
    """What a HookedTransformer-layout state dict's shapes say of the architecture, and the evidence for each field
    (a parameter and its shape, named in a mismatch)."""
    W_Q, W_E = sd.get("blocks.0.attn.W_Q"), sd.get("embed.W_E")
    if W_Q is None or W_E is None:
        raise ConfigError(FIELD, "weights without embed.W_E and blocks.0.attn.W_Q: not a transformer")
    n_layers = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k)))
    n_heads, d_model, d_head = W_Q.shape
    mlp, pos = sd.get("blocks.0.mlp.W_in"), sd.get("pos_embed.W_pos")
    q = f"blocks.0.attn.W_Q is {external.shape_text(W_Q)} (n_heads × d_model × d_head)"
    found = {"n_layers": n_layers, "n_heads": n_heads, "d_model": d_model, "d_head": d_head, "attn_only": mlp is None}
    why = {
        "n_layers": f"the checkpoint has blocks 0 to {n_layers - 1}",
        "n_heads": q,
        "d_head": q,
        "d_model": q,
        "attn_only": "the checkpoint has " + ("no MLP weights" if mlp is None else "MLP weights (blocks.0.mlp.W_in)"),
    }
    if mlp is not None:
        found["d_mlp"], why["d_mlp"] = (
            mlp.shape[1],
            f"blocks.0.mlp.W_in is {external.shape_text(mlp)} (d_model × d_mlp)",
        )
    if pos is not None:
        found["n_ctx"], why["n_ctx"] = pos.shape[0], f"pos_embed.W_pos is {external.shape_text(pos)} (n_ctx × d_model)"
    if "blocks.0.ln1.w" in sd:
        found["normalization"], why["normalization"] = "LN", "the checkpoint has layer-norm weights (blocks.0.ln1.w)"
    return found, why


def architecture(
    sd: dict[str, Tensor], declared: dict[str, Any], source: dict[str, str], info: dict[str, Any]
) -> Found:
    """TransformerConfig fields of a HookedTransformer-layout state dict: its shapes, what the file says (nanoGPT:
    GELU; tracr: its config), and what was declared (the TransformerLens config, --set), which must agree with the
    shapes: a declared head count the weights contradict is refused, never loaded as a different model."""
    found, why = shapes(sd)
    out = Found(dict(found), {k: WEIGHTS for k in found})
    if "nanogpt" in info:
        out.fields["act_fn"], out.source["act_fn"] = "gelu", "nanoGPT"  # nanoGPT's MLP: nn.GELU() (exact erf)
    if "tracr" in info:
        out.fields |= info["tracr"]["config"]
        out.source |= {k: "the tracr program" for k in info["tracr"]["config"]}
    for key, value in declared.items():
        if key in found and found[key] != value and not (key == "d_mlp" and found["attn_only"]):
            raise ConfigError(
                f"model.{key}",
                f"{value} (from {source[key]}), but {why[key]} in the checkpoint "
                f"({key} {found[key]}); {_fix(key, found[key], source)}",
            )
    absent_ln = "normalization" not in found and declared.get("normalization") == "LN"
    if absent_ln:
        raise ConfigError(
            "model.normalization",
            f"LN (from {source['normalization']}), but the checkpoint has no "
            "layer-norm weights (blocks.0.ln1.w), which is LNPre or none; "
            f"{_fix('normalization', 'LNPre', source)}",
        )
    out.fields |= declared
    out.source |= {k: source[k] for k in declared}
    if "pos_embed.W_pos" in sd and "positional" not in out.fields:
        out.fields["positional"], out.source["positional"] = "standard", WEIGHTS
    # What shapes cannot say is asked for, or (positions alone, where the choice rarely matters less than a refusal
    # would) guessed and said to be a guess.
    if "positional" not in out.fields:
        out.fields["positional"], out.source["positional"] = "rotary", WEIGHTS
        out.guessed["positional"] = (
            "rotary, a guess: the weights have no pos_embed.W_pos, which is rotary or none "
            "(--set model.positional=none if it had no positions)"
        )
    if "normalization" not in out.fields:
        raise ConfigError(
            "model.normalization",
            "missing: the weights have no layer-norm weights, which is LNPre or "
            "none; give it (--set model.normalization=none)",
        )
    if not out.fields["attn_only"] and "act_fn" not in out.fields:
        raise ConfigError(
            "model.act_fn",
            "missing: the weights have MLPs and do not say their activation; give it "
            "(--set model.act_fn=gelu); allowed: relu, gelu, gelu_new, silu",
        )
    return out


def tl_fields(cfg: Any, where: str) -> dict[str, Any]:
    """TransformerConfig fields of a TransformerLens config (a dict of HookedTransformerConfig fields), refusing
    options mechsynth's transformer does not model (they would import a model that computes differently)."""
    if not isinstance(cfg, dict):
        raise ConfigError(where, f"expected a table of HookedTransformerConfig fields, got {show(cfg)}")
    missing = [k for k in ("n_layers", "d_model", "d_head") if not isinstance(cfg.get(k), int)]
    if missing:
        raise ConfigError(where, f"missing or not an integer: {', '.join(missing)} (HookedTransformerConfig fields)")
    for key, modelled in external._MODELLED.items():
        value = cfg.get(key, modelled)
        if value != modelled and not (modelled is None and value in (None, cfg.get("n_heads"))):
            raise ConfigError(where, f"{key}={value!r}; mechsynth models transformers with {key}={modelled!r}")
    norm = cfg.get("normalization_type", "LN")
    if norm not in external._NORMS:
        raise ConfigError(where, f"normalization_type={norm!r} is not modelled; allowed: LN, LNPre, None")
    n_heads = cfg.get("n_heads", -1)
    n_heads = cfg["d_model"] // cfg["d_head"] if n_heads in (None, -1) else n_heads  # TL's own default
    out = {
        "n_layers": cfg["n_layers"],
        "n_heads": n_heads,
        "d_model": cfg["d_model"],
        "d_head": cfg["d_head"],
        "attn_only": bool(cfg.get("attn_only", False)),
        "normalization": external._NORMS[norm],
        "positional": cfg.get("positional_embedding_type", "standard"),
    }
    if not out["attn_only"]:
        out |= {"d_mlp": cfg.get("d_mlp"), "act_fn": cfg.get("act_fn")}
    if isinstance(cfg.get("n_ctx"), int) and out["positional"] == "standard":
        out["n_ctx"] = cfg["n_ctx"]
    return {k: v for k, v in out.items() if v is not None}


def read_tl_config(tl_config: Path | str | dict[str, Any]) -> dict[str, Any]:
    """A TransformerLens config given as a dict or a JSON file of HookedTransformerConfig fields."""
    if isinstance(tl_config, dict):
        return tl_config
    check(isinstance(tl_config, (str, os.PathLike)), "--tl-config", f"expected a JSON file, got {show(tl_config)}")
    path = Path(tl_config)
    if not path.is_file():
        raise RunFileError(path, "no such file")
    data = io.read_json(path)
    if not isinstance(data, dict):
        raise CorruptFileError(path, "not a JSON table of HookedTransformerConfig fields")
    return data


__all__ = ["Found", "architecture", "bridge_heads", "hooked_layout", "read_tl_config", "shapes", "tl_fields"]
