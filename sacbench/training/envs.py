"""The Gymnasium MuJoCo tasks sacbench trains on: checks, their sizes, and one env step.

The benchmark reproduces CleanRL's six v4 tasks, but any registered Gymnasium MuJoCo env with a
continuous (Box) action space trains the same way (the v5 tasks, Ant, Swimmer, Reacher, ...).
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import io
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from sacbench.training.errors import RunDirError

# CleanRL's SAC benchmark (tag pr-424): the default run matrix.
BENCHMARK_ENV_IDS: tuple[str, ...] = (
    "HalfCheetah-v4",
    "Walker2d-v4",
    "Hopper-v4",
    "InvertedPendulum-v4",
    "Humanoid-v4",
    "Pusher-v4",
)


class EnvError(ValueError):
    """An environment id or space that sacbench cannot train on."""


@dataclass(frozen=True)
class EnvSpaces:
    """The lengths of a task's flat observation and action vectors, read from the env itself."""

    observation_size: int
    action_size: int


def check_env_id(env_id: str) -> None:
    """Reject an id that is not registered, cannot be made with the installed packages (e.g. the
    mujoco-py v2/v3 tasks), is not a MuJoCo env, or whose action space is not a continuous Box."""
    env_spaces(env_id)


def env_spaces(env_id: str) -> EnvSpaces:
    """The task's observation and action sizes, from one env made and closed (cached per
    process: the pipeline asks once per train job for its memory and time limit)."""
    if not isinstance(env_id, str) or env_id not in gym.registry:
        raise EnvError(_unknown_id_message(env_id))
    _check_mujoco_pin(env_id)  # outside the cache: the installed mujoco is read every time
    return _made_env_spaces(env_id)


@functools.cache
def _made_env_spaces(env_id: str) -> EnvSpaces:
    try:
        with warnings.catch_warnings():
            # "out of date, consider v5": the benchmark's v4 tasks are chosen on purpose, and the
            # pipeline checks every task on each start.
            warnings.simplefilter("ignore", DeprecationWarning)
            env = gym.make(env_id)
    except Exception as error:  # any failure to build the env, e.g. a missing dependency
        raise EnvError(
            f"{env_id} is registered but cannot be made with the installed packages "
            f"({type(error).__name__}: {error})"
        ) from error
    try:
        _check_spaces(env_id, env)
        observation_space, action_space = env.observation_space, env.action_space
        assert observation_space.shape is not None and action_space.shape is not None
        return EnvSpaces(
            observation_size=int(observation_space.shape[0]), action_size=int(action_space.shape[0])
        )
    finally:
        env.close()


def _unknown_id_message(env_id: object) -> str:
    close = difflib.get_close_matches(str(env_id), list(gym.registry), n=3) if env_id else []
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    return (
        f"unknown env id {env_id!r}{hint}: not registered in Gymnasium "
        f"{importlib.metadata.version('gymnasium')}; any Gymnasium MuJoCo task with a continuous "
        f"action space trains, e.g. the benchmark's tasks: {', '.join(BENCHMARK_ENV_IDS)}"
    )


def _check_mujoco_pin(env_id: str) -> None:
    if env_id == "Pusher-v4":
        mujoco_version = importlib.metadata.version("mujoco")
        if int(mujoco_version.split(".")[0]) >= 3:
            raise EnvError(
                f"Pusher-v4 needs mujoco<3 under Gymnasium 1.x, but mujoco {mujoco_version} is "
                "installed; install the pinned mujoco==2.3.7 (requirements.lock)"
            )


def _check_spaces(env_id: str, env: gym.Env) -> None:
    """SAC squashes actions into finite Box bounds; the buffer stores flat float vectors; a
    checkpoint keeps MuJoCo's simulator state, so that a resumed episode continues exactly."""
    # Imported here: it loads mujoco, which only a made MuJoCo env needs.
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    action_space, observation_space = env.action_space, env.observation_space
    if not isinstance(action_space, gym.spaces.Box):
        raise EnvError(
            f"{env_id} has a {type(action_space).__name__} action space; SAC needs a continuous "
            "(Box) one"
        )
    if len(action_space.shape) != 1 or not np.all(
        np.isfinite(action_space.low) & np.isfinite(action_space.high)
    ):
        raise EnvError(
            f"{env_id} has the action space {action_space}; SAC needs a flat Box with finite bounds"
        )
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        raise EnvError(
            f"{env_id} has the observation space {observation_space}; sacbench needs a flat Box"
        )
    if not isinstance(env.unwrapped, MujocoEnv):
        raise EnvError(
            f"{env_id} is not a MuJoCo env ({type(env.unwrapped).__module__}); sacbench trains "
            "MuJoCo tasks only, because its checkpoints keep MuJoCo's simulator state to resume "
            "an episode exactly"
        )


def make_env(env_id: str, *, seed: int) -> gym.Env:
    """One plain (non-vector) env, so Gymnasium 1.x's vector autoreset cannot shift transitions.

    Observations are cast to float32 in the trainer, as CleanRL's buffer does.
    """
    check_env_id(env_id)
    env = gym.make(env_id)
    _check_spaces(env_id, env)
    env.action_space.seed(seed)
    return env


def capture_env_state(env: gym.Env) -> dict[str, Any]:
    """Everything needed to continue an episode bit-for-bit after a restart.

    The whole MjData is kept (not just qpos/qvel): some tasks' rewards read quantities the previous
    step computed, and the solver warm-starts from the previous step's accelerations. It is kept
    as a pickle because nothing public serialises all of it: mujoco 2.3.7's mj_getState omits
    the derived fields the next step reads. E.g. Humanoid-v4's reward starts from the centre of
    mass in data.xipos as the previous mj_step left it (computed before that step integrated);
    after mj_setState and mj_forward, xipos is recomputed at the new positions, so the first
    reward after a resume would differ. The pickle is read back by a restricted unpickler
    (load_mj_data), so a checkpoint cannot make the trainer run code.
    """
    # Imported here: private_api loads torch, which the pipeline's env checks do not need.
    from sacbench.private_api import time_limit_steps

    unwrapped = env.unwrapped
    return {
        "mj_data": pickle.dumps(unwrapped.data),  # type: ignore[attr-defined]
        "elapsed_steps": time_limit_steps(env),
        "env_rng": unwrapped.np_random.bit_generator.state,
        "action_space_rng": env.action_space.np_random.bit_generator.state,
    }


def restore_env_state(env: gym.Env, state: dict[str, Any], *, source: Path) -> None:
    """Continue the episode `state` captured; `source` (the checkpoint file) names it in errors."""
    from sacbench.private_api import set_time_limit_steps

    unwrapped = env.unwrapped
    unwrapped.data = load_mj_data(state["mj_data"], source=source)  # type: ignore[attr-defined]
    set_time_limit_steps(env, state["elapsed_steps"])
    unwrapped.np_random.bit_generator.state = state["env_rng"]
    env.action_space.np_random.bit_generator.state = state["action_space_rng"]


# The only global a pickled MjData names (mujoco 2.3.7); tests/test_checkpoint.py checks a real
# one, so a mujoco release that pickles differently fails there, not at a resume.
MJ_DATA_PICKLE_GLOBALS = frozenset({("mujoco._structs", "MjData")})


class _MjDataUnpickler(pickle.Unpickler):
    """Unpickles an MjData and nothing else: any other global is refused before it is looked up."""

    def __init__(self, blob: bytes, *, source: Path) -> None:
        super().__init__(io.BytesIO(blob))
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in MJ_DATA_PICKLE_GLOBALS:
            raise RunDirError(
                f"checkpoint {self.source} cannot be loaded: its MuJoCo state (env.mj_data) "
                f"names {module}.{name}, but only mujoco._structs.MjData may be unpickled there, "
                "so nothing it names was called. Nothing was deleted - move it away to start "
                "this run afresh"
            )
        return super().find_class(module, name)


def load_mj_data(blob: bytes, *, source: Path) -> Any:
    """The MjData pickled in `blob` by capture_env_state; RunDirError for any other content."""
    return _MjDataUnpickler(blob, source=source).load()


def float32_observation(observation: np.ndarray) -> np.ndarray:
    return np.asarray(observation, dtype=np.float32)


@dataclass(frozen=True)
class Transition:
    next_observation: np.ndarray  # what the buffer stores: the true next (or final) observation
    reward: float
    terminated: bool  # stops bootstrapping; a time-limit truncation does not
    episode_over: bool  # terminated or truncated
    continue_from: np.ndarray  # the observation the next step acts on (a reset one after an end)


def step_env(env: gym.Env, *, action: np.ndarray) -> Transition:
    """One environment step; a finished episode is reset after its final observation is kept."""
    next_observation, reward, terminated, truncated, _ = env.step(action)
    next_observation = float32_observation(next_observation)
    episode_over = bool(terminated or truncated)
    continue_from = next_observation
    if episode_over:
        reset_observation, _ = env.reset()
        continue_from = float32_observation(reset_observation)
    return Transition(
        next_observation=next_observation,
        reward=float(reward),
        terminated=bool(terminated),
        episode_over=episode_over,
        continue_from=continue_from,
    )
