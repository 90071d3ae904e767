"""Training: the loop, env stepping, RNG, signals, checkpoints and the run dir (issue 11).

Imports the SAC algorithm (sacbench.sac) and the shared leaves only.
"""
