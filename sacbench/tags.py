"""The TensorBoard scalar tags a run writes: CleanRL's, plus sacbench's two (docs/contracts.md)."""

from __future__ import annotations

# Written every 100 steps once training has started (global_step > learning_starts).
LOSS_TAGS: tuple[str, ...] = (
    "losses/qf1_values",
    "losses/qf2_values",
    "losses/qf1_loss",
    "losses/qf2_loss",
    "losses/qf_loss",
    "losses/actor_loss",
    "losses/alpha",
    "losses/alpha_loss",
)
# One point per finished episode, at the episode's last step.
EPISODE_TAGS: tuple[str, ...] = ("charts/episodic_return", "charts/episodic_length")
# At the loss cadence; they measure time, so they differ between any two runs.
TIME_TAGS: tuple[str, ...] = ("charts/SPS", "charts/steady_SPS", "charts/elapsed_seconds")
