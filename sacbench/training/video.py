"""Videos of evaluation episodes: Gymnasium's RecordVideo, rendered on a machine without a display.

MuJoCo renders offscreen through OpenGL, and the backend is chosen by the MUJOCO_GL environment
variable, which Gymnasium reads when an env first renders. On a headless machine the default
(GLFW) needs a display, so sacbench sets MUJOCO_GL=egl when it is unset: EGL renders with Mesa's
software rasteriser on CPU nodes (Debian's libegl1, libegl-mesa0, libgl1-mesa-dri, libopengl0)
and with the NVIDIA driver's EGL on GPU nodes. MUJOCO_GL=osmesa (Debian's libosmesa6) also works.
A video is written by moviepy (pinned in requirements.lock) through imageio-ffmpeg's ffmpeg.

Each recording goes to a hidden staging folder first and is then moved into place, so a reader
never sees a half-written video and RecordVideo never writes over another file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
from gymnasium.wrappers import RecordVideo

DEFAULT_BACKEND = "egl"
VIDEO_DIR_NAME = "videos"
FINAL_VIDEO_NAME = "final.mp4"
# A free name is looked for among this many (stem.mp4, stem-2.mp4, ...), never overwriting one.
_MAX_NAME_TRIES = 1000


class VideoError(RuntimeError):
    """A video that cannot be rendered or written; the message names the backend or the file."""


def use_headless_rendering() -> str:
    """Set MUJOCO_GL to egl unless the user chose a backend; return the backend in use."""
    return os.environ.setdefault("MUJOCO_GL", DEFAULT_BACKEND)


def check_rendering(env_id: str) -> None:
    """Render one frame now, so a machine that cannot render fails before any training."""
    backend = use_headless_rendering()
    env = gym.make(env_id, render_mode="rgb_array")
    try:
        env.reset(seed=0)
        frame = env.render()
    except Exception as error:  # noqa: BLE001 - any GL failure, reported with the backend
        raise VideoError(
            f"cannot render {env_id} with MUJOCO_GL={backend} ({type(error).__name__}: {error}); "
            "for egl install Debian's libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0, or set "
            "MUJOCO_GL=osmesa with libosmesa6 installed"
        ) from error
    finally:
        env.close()
    if frame is None or getattr(frame, "ndim", 0) != 3:
        raise VideoError(f"{env_id} rendered no RGB frame with MUJOCO_GL={backend}")


def training_video_path(run_dir: Path, *, step: int, final: bool) -> Path:
    """videos/final.mp4 for the final evaluation, videos/step-{step}.mp4 for the others."""
    name = FINAL_VIDEO_NAME if final else f"step-{step}.mp4"
    return run_dir / VIDEO_DIR_NAME / name


def free_video_path(folder: Path, *, stem: str) -> Path:
    """folder/stem.mp4, or stem-2.mp4, stem-3.mp4, ...: the first name no file has."""
    for index in range(1, _MAX_NAME_TRIES + 1):
        path = folder / (f"{stem}.mp4" if index == 1 else f"{stem}-{index}.mp4")
        if not path.exists():
            return path
    raise VideoError(f"{folder} already holds {_MAX_NAME_TRIES} videos named {stem}*.mp4")


@contextmanager
def recording_env(env_id: str, path: Path, *, replace: bool) -> Iterator[gym.Env]:
    """An env whose first episode (from its first reset until the context ends) is filmed into
    `path`. With replace=False an existing `path` is an error and is left as it is."""
    use_headless_rendering()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".recording-", dir=path.parent))
    try:
        env = RecordVideo(
            gym.make(env_id, render_mode="rgb_array"),
            video_folder=str(staging / "recording"),  # a new folder: RecordVideo warns of old ones
            episode_trigger=lambda episode: episode == 0,
            name_prefix="episode",
            disable_logger=True,
        )
        try:
            yield env
        finally:
            env.close()  # writes the recording
        _move_into_place(staging, path, replace=replace)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(staging: Path, path: Path, *, replace: bool) -> None:
    recorded = sorted(staging.glob("recording/*.mp4"))
    if len(recorded) != 1:
        raise VideoError(f"the recording of {path.name} left {len(recorded)} videos, not one")
    if replace:
        os.replace(recorded[0], path)
        return
    try:
        os.link(recorded[0], path)  # fails, rather than overwrites, when the name was taken
    except FileExistsError:
        raise VideoError(f"{path} already exists; it was left as it is") from None
