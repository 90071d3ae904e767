"""A small CleanRL-style training script for the tests of command variants, written into a
temporary folder by the tests that need it.

It takes the flags of CleanRL's sac_continuous_action.py (and rejects any other, as tyro does),
and logs CleanRL's tags with the real torch.utils.tensorboard SummaryWriter into
runs/{env_id}__{exp_name}__{seed}__{unix time}/ below its working directory, as CleanRL does:
charts/episodic_return and charts/episodic_length at the end of each 50-step episode, and
losses/* with charts/SPS every 100 steps once global_step > learning_starts. It simulates no
environment, so it needs no MuJoCo and runs in a few seconds; it sleeps 0.2 ms per step, so the
event wall times advance as a real run's do.

Two environment variables steer it:
- FAKE_CLEANRL_FAIL_AT_STEP=N: flush its events and exit with status 1 at step N;
- FAKE_CLEANRL_INVOCATIONS=FILE: append one line per start to FILE (how often it ran, with
  its OMP_NUM_THREADS, working directory and flags).
"""

from __future__ import annotations

import sys
from pathlib import Path

# The script's episodes last this many steps; episode k (from 0) ends at step 50 k + 49 and
# returns seed + step / 100.
EPISODE_STEPS = 50

SCRIPT = r"""
import argparse
import os
import sys
import time

from torch.utils.tensorboard import SummaryWriter

EPISODE_STEPS = {episode_steps}

parser = argparse.ArgumentParser(allow_abbrev=False)
parser.add_argument("--exp-name", default="fake_sac_continuous_action")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--env-id", default="Hopper-v4")
for name, kind, default in [
    ("total-timesteps", int, 1000000), ("num-envs", int, 1), ("buffer-size", int, 1000000),
    ("gamma", float, 0.99), ("tau", float, 0.005), ("batch-size", int, 256),
    ("learning-starts", int, 5000), ("policy-lr", float, 3e-4), ("q-lr", float, 1e-3),
    ("policy-frequency", int, 2), ("target-network-frequency", int, 1), ("alpha", float, 0.2),
    ("wandb-project-name", str, "cleanRL"), ("wandb-entity", str, None),
]:
    parser.add_argument(f"--{name}", type=kind, default=default)
for name, default in [
    ("torch-deterministic", True), ("cuda", True), ("track", False), ("capture-video", False),
    ("autotune", True),
]:
    parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default)
args = parser.parse_args()

if os.environ.get("FAKE_CLEANRL_INVOCATIONS"):
    with open(os.environ["FAKE_CLEANRL_INVOCATIONS"], "a") as log:
        threads = os.environ.get("OMP_NUM_THREADS")
        log.write(f"OMP_NUM_THREADS={threads} cwd={os.getcwd()} " + " ".join(sys.argv[1:]) + "\n")
fail_at = int(os.environ.get("FAKE_CLEANRL_FAIL_AT_STEP", "-1"))

run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
writer = SummaryWriter(f"runs/{run_name}")
writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
    f"|{key}|{value}|" for key, value in vars(args).items()))
start_time = time.time()
for global_step in range(args.total_timesteps):
    time.sleep(0.0002)
    if global_step == fail_at:
        writer.close()
        print(f"failing on purpose at global_step={global_step}", flush=True)
        sys.exit(1)
    if (global_step + 1) % EPISODE_STEPS == 0:
        episodic_return = args.seed + global_step / 100.0
        print(f"global_step={global_step}, episodic_return={episodic_return}")
        writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        writer.add_scalar("charts/episodic_length", EPISODE_STEPS, global_step)
    if global_step > args.learning_starts and global_step % 100 == 0:
        for name in ("qf1_values", "qf2_values", "qf1_loss", "qf2_loss", "qf_loss",
                     "actor_loss", "alpha", "alpha_loss"):
            writer.add_scalar(f"losses/{name}", 1.0 / global_step, global_step)
        sps = int(global_step / (time.time() - start_time))
        print("SPS:", sps)
        writer.add_scalar("charts/SPS", sps, global_step)
writer.close()
"""


def script_text() -> str:
    """The script's source, its episode length filled in."""
    return SCRIPT.replace("{episode_steps}", str(EPISODE_STEPS))


def write_script(folder: Path) -> Path:
    """The script as `folder`/fake_sac_continuous_action.py; returns its absolute path."""
    path = (folder / "fake_sac_continuous_action.py").resolve()
    path.write_text(script_text())
    return path


def write_checkout(folder: Path, *, script: str | None = None) -> Path:
    """A folder laid out as a clone of vwxyzjn/cleanrl, with the script (or `script`'s text) as
    its cleanrl/sac_continuous_action.py; returns the folder's absolute path."""
    (folder / "cleanrl").mkdir(parents=True)
    text = script_text() if script is None else script
    (folder / "cleanrl" / "sac_continuous_action.py").write_text(text)
    return folder.resolve()


def command(folder: Path) -> str:
    """A command variant's `command` that runs the script with this interpreter."""
    return f"{sys.executable} {write_script(folder)}"
