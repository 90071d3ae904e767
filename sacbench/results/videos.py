"""`report video`: a run's final-evaluation video, copied out of its run dir and wrapped in an
HTML page that plays it, for the Snakemake report.

The trainer with --capture-video films the first episode of its final evaluation into
``{run_dir}/videos/final.mp4`` (docs/contracts.md). Snakemake's report shows images, HTML and
PDF inline but offers any other file, an MP4 included, only as a download, so the page embeds
the video (as a data URI) in a ``<video>`` element that plays inside the report.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from sacbench.atomic import write_atomically
from sacbench.results.runs import ResultsInputError, read_json_object

# The trainer's contract (docs/contracts.md): where --capture-video puts the final evaluation's
# first episode, relative to the run dir.
FINAL_VIDEO = Path("videos") / "final.mp4"
# Every MP4 (ISO base media file) starts with a box of this type, at byte 4.
_MP4_FIRST_BOX = b"ftyp"


def final_video(run_dir: Path) -> bytes:
    """The bytes of the run's final-evaluation video; errors name the run dir and say why."""
    path = run_dir / FINAL_VIDEO
    if not path.is_file():
        raise ResultsInputError(
            f"{run_dir}: no {FINAL_VIDEO}, the first episode of the run's final evaluation, "
            "which the trainer films with --capture-video (the pipeline passes it to the first "
            "seed of each task in video_env_ids). Run the train job again with it (snakemake "
            f"--forcerun {run_dir / 'complete.json'}): a finished run is not trained again, its "
            "final evaluation is filmed from its final state. A run finished by sacbench 0.1.0 "
            f"keeps no final actor: move it aside (mv {run_dir} {run_dir}.old) to train it "
            "again, or drop its task from video_env_ids"
        )
    data = path.read_bytes()
    if data[4:8] != _MP4_FIRST_BOX:
        raise ResultsInputError(f"{path}: not an MP4 file (no ftyp box at byte 4)")
    return data


def video_page(*, video: bytes, title: str, caption: str) -> str:
    """A self-contained HTML page that plays ``video`` (MP4 bytes) with a title and caption."""
    source = "data:video/mp4;base64," + base64.b64encode(video).decode("ascii")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        "<style>body { font-family: sans-serif; margin: 1em; } "
        "video { max-width: 100%; }</style>\n</head>\n<body>\n"
        f"<h3>{html.escape(title)}</h3>\n"
        f'<video controls loop muted autoplay playsinline src="{source}"></video>\n'
        f"<p>{html.escape(caption)}</p>\n</body>\n</html>\n"
    )


def publish_video(*, run_dir: Path | str, mp4: Path | str, page: Path | str) -> None:
    """Copy the run's final video to ``mp4`` and write the HTML ``page`` that plays it; both are
    computed before either is written, each atomically."""
    run_dir, mp4, page = Path(run_dir), Path(mp4), Path(page)
    if mp4.suffix != ".mp4" or page.suffix != ".html":
        raise ResultsInputError(f"--mp4 must end in .mp4 and --html in .html, got {mp4}, {page}")
    if not run_dir.is_dir():
        raise ResultsInputError(f"run dir {run_dir} does not exist")
    complete = read_json_object(run_dir / "complete.json", what="the completion record")
    args = read_json_object(run_dir / "metadata.json", what="the run's metadata").get("args", {})
    video = final_video(run_dir)
    variant, env_id, seed = (args.get(key) for key in ("exp_name", "env_id", "seed"))
    steps = complete.get("global_step")
    steps_text = f"{steps:,}" if isinstance(steps, int) else "all its"
    text = video_page(
        video=video,
        title=f"{variant}: {env_id}, seed {seed}",
        caption=f"The first episode of the final evaluation, after {steps_text} training steps: "
        "the deterministic policy (tanh of the actor's mean, scaled to the action bounds) on an "
        f"env of its own, seeded apart from training. From {run_dir / FINAL_VIDEO}.",
    )
    write_atomically(mp4, video)
    write_atomically(page, text)
