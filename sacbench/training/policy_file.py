"""The saved policy, `{run_dir}/{exp_name}.cleanrl_model` (format: docs/contracts.md).

In the spirit of CleanRL's TD3 and DDPG scripts, which save their model to
`runs/{run_name}/{exp_name}.cleanrl_model` with torch.save: here the file holds the actor alone,
as CPU tensors, with what is needed to rebuild it without the trainer, so that it loads with
`torch.load(path, map_location="cpu", weights_only=True)` on any machine, GPU or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sacbench.atomic import write_atomically
from sacbench.provenance import sacbench_version
from sacbench.sac.algorithm import Actor

POLICY_SUFFIX = ".cleanrl_model"
POLICY_FORMAT = "sacbench actor"
POLICY_FORMAT_VERSION = 1
HIDDEN_SIZES = [256, 256]  # sacbench.sac.algorithm.Actor's, recorded so a reader need not know
_REQUIRED = {
    "format": str,
    "format_version": int,
    "env_id": str,
    "obs_dim": int,
    "action_dim": int,
    "hidden_sizes": list,
    "action_low": list,
    "action_high": list,
    "actor": dict,
    "seed": int,
    "global_step": int,
}


class PolicyFileError(ValueError):
    """A policy file that is missing, damaged or not sacbench's; the message names the file."""


def policy_path(run_dir: Path, *, exp_name: str) -> Path:
    return run_dir / f"{exp_name}{POLICY_SUFFIX}"


def actor_from_state_dict(state_dict: dict[str, torch.Tensor]) -> Actor:
    """An Actor (on the CPU) holding `state_dict`; its sizes and bounds are read from it."""
    scale = state_dict["action_scale"].detach().cpu().numpy()
    bias = state_dict["action_bias"].detach().cpu().numpy()
    actor = Actor(
        obs_dim=int(state_dict["fc1.weight"].shape[1]),
        action_low=bias - scale,
        action_high=bias + scale,
    )
    actor.load_state_dict({name: tensor.cpu() for name, tensor in state_dict.items()})
    return actor.eval()


def save_policy(path: Path, *, actor: Actor, env_id: str, seed: int, global_step: int, **about):
    """Write the actor atomically, as CPU tensors; `about` adds keys (exp_name, update_path)."""
    scale, bias = actor.action_scale.detach().cpu(), actor.action_bias.detach().cpu()
    payload: dict[str, Any] = {
        "format": POLICY_FORMAT,
        "format_version": POLICY_FORMAT_VERSION,
        "env_id": env_id,
        "obs_dim": actor.fc1.in_features,
        "action_dim": actor.fc_mean.out_features,
        "hidden_sizes": [actor.fc1.out_features, actor.fc2.out_features],
        "action_low": (bias - scale).tolist(),
        "action_high": (bias + scale).tolist(),
        "actor": {name: value.detach().cpu().clone() for name, value in actor.state_dict().items()},
        "seed": seed,
        "global_step": global_step,
        "sacbench": sacbench_version(),
        **about,
    }
    write_atomically(path, lambda handle: torch.save(payload, handle))


@dataclass(frozen=True)
class SavedPolicy:
    path: Path
    actor: Actor  # on the CPU
    env_id: str
    seed: int
    global_step: int
    payload: dict[str, Any]


def load_policy(path: Path) -> SavedPolicy:
    """The policy saved at `path`; PolicyFileError, naming the file, when it is not usable."""
    if not path.is_file():
        raise PolicyFileError(f"{path}: no such policy file (train with --save-model to write it)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - report any damage with the file's name
        kind = type(error).__name__
        raise PolicyFileError(f"{path} cannot be loaded ({kind}: {error})") from None
    _check_payload(path, payload)
    try:
        actor = actor_from_state_dict(payload["actor"])
    except (KeyError, RuntimeError) as error:
        message = f"{path}: weights that do not fit sacbench's Actor ({error})"
        raise PolicyFileError(message) from None
    sizes = (actor.fc1.in_features, actor.fc_mean.out_features)
    if sizes != (payload["obs_dim"], payload["action_dim"]):
        raise PolicyFileError(
            f"{path}: obs_dim, action_dim {payload['obs_dim']}, {payload['action_dim']} disagree "
            f"with its weights' {sizes[0]}, {sizes[1]}"
        )
    return SavedPolicy(
        path, actor, payload["env_id"], payload["seed"], payload["global_step"], payload
    )


def _check_payload(path: Path, payload: object) -> None:
    if not isinstance(payload, dict) or payload.get("format") != POLICY_FORMAT:
        raise PolicyFileError(f"{path} is not a sacbench policy file (format {POLICY_FORMAT!r})")
    if payload.get("format_version") != POLICY_FORMAT_VERSION:
        raise PolicyFileError(
            f"{path}: format_version {payload.get('format_version')!r}; this sacbench reads "
            f"version {POLICY_FORMAT_VERSION}"
        )
    for key, kind in _REQUIRED.items():
        if not isinstance(payload.get(key), kind):
            raise PolicyFileError(f"{path}: {key} missing or not a {kind.__name__}")
    if payload["hidden_sizes"] != HIDDEN_SIZES:
        raise PolicyFileError(
            f"{path}: hidden_sizes {payload['hidden_sizes']}; sacbench's actor has {HIDDEN_SIZES}"
        )
