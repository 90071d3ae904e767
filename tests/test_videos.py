"""`report video`: a run's final-evaluation video becomes an MP4 and an HTML page that plays it,
made from a real MuJoCo rendering encoded by ffmpeg."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_runs import SyntheticRun, write_run_dir

from sacbench.results.cli import main

# Renders InvertedPendulum-v4 offscreen (EGL, no display needed) and encodes it as MP4, in a
# process of its own: MuJoCo picks its GL backend once per process.
RENDER = """
import sys, gymnasium as gym, imageio.v2 as imageio
env = gym.make("InvertedPendulum-v4", render_mode="rgb_array", width=96, height=96)
env.reset(seed=0)
frames = []
for _ in range(12):
    env.step(env.action_space.sample())
    frames.append(env.render())
imageio.mimwrite(sys.argv[1], frames, fps=25, format="FFMPEG", macro_block_size=16)
"""


@pytest.fixture(scope="module")
def rendered_mp4(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pytest.importorskip("imageio_ffmpeg")
    path = tmp_path_factory.mktemp("video") / "rendered.mp4"
    done = subprocess.run(
        [sys.executable, "-c", RENDER, str(path)],
        env={"MUJOCO_GL": "egl", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return path.read_bytes()


def _run_dir(tmp_path: Path, video: bytes | None) -> Path:
    run_dir = write_run_dir(tmp_path / "run", SyntheticRun(env_id="InvertedPendulum-v4"))
    if video is not None:
        (run_dir / "videos").mkdir()
        (run_dir / "videos" / "final.mp4").write_bytes(video)
    return run_dir


def test_the_video_is_copied_and_played_by_a_page(tmp_path: Path, rendered_mp4: bytes) -> None:
    import imageio.v2 as imageio

    run_dir = _run_dir(tmp_path, rendered_mp4)
    mp4, page = tmp_path / "out" / "InvertedPendulum-v4.mp4", tmp_path / "out" / "page.html"
    assert main(["video", "--run-dir", str(run_dir), "--mp4", str(mp4), "--html", str(page)]) == 0
    assert mp4.read_bytes() == rendered_mp4
    reader = imageio.get_reader(mp4, format="FFMPEG")
    first = reader.get_data(0)
    assert reader.count_frames() == 12 and first.shape == (96, 96, 3) and first.std() > 0
    reader.close()
    text = page.read_text()
    source = re.search(r'<video [^>]*src="data:video/mp4;base64,([A-Za-z0-9+/=]+)"', text)
    assert source and base64.b64decode(source.group(1)) == rendered_mp4
    assert "sac_continuous_action: InvertedPendulum-v4, seed 1" in text
    assert "after 2,000 training steps" in text
    assert sorted(p.name for p in mp4.parent.iterdir()) == ["InvertedPendulum-v4.mp4", "page.html"]


def test_a_run_without_its_video_is_an_error_naming_the_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, None)
    mp4, page = tmp_path / "out.mp4", tmp_path / "out.html"
    page.write_text("an older page")
    assert main(["video", "--run-dir", str(run_dir), "--mp4", str(mp4), "--html", str(page)]) == 1
    error = capsys.readouterr().err
    assert f"{run_dir}: no videos/final.mp4" in error
    assert "--capture-video" in error and "video_env_ids" in error
    assert page.read_text() == "an older page" and not mp4.exists()


def test_a_file_that_is_not_an_mp4_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, b"\x00" * 64)
    args = ["--mp4", str(tmp_path / "o.mp4"), "--html", str(tmp_path / "o.html")]
    assert main(["video", "--run-dir", str(run_dir), *args]) == 1
    assert f"{run_dir / 'videos' / 'final.mp4'}: not an MP4 file" in capsys.readouterr().err
    (run_dir / "complete.json").unlink()
    assert main(["video", "--run-dir", str(run_dir), *args]) == 1
    assert f"{run_dir / 'complete.json'} not found" in capsys.readouterr().err


def test_the_video_path_is_the_one_the_trainer_writes() -> None:
    from sacbench.results.videos import FINAL_VIDEO
    from sacbench.training.video import training_video_path

    assert training_video_path(Path("run"), step=2000, final=True) == Path("run") / FINAL_VIDEO
