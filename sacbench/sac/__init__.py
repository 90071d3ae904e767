"""The SAC algorithm: networks, policy sampling, losses, the update schedule and the learners.

Imports only the shared leaves (sacbench.tags, sacbench.private_api, ...), never training or
results; sacbench.sac.algorithm is the place to start reading.
"""
