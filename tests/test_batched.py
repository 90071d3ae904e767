"""Seeds trained together in one BatchedLearner equal the same seeds trained alone by FastLearner.

The alone side is the real default path: each seed its own FastLearner, drawing from torch's
default generator, which the test sets to that seed's state before each of its updates and reads
back after. The batched side gets one generator per seed, started from the same states. Both
see the same batches, with CleanRL's schedule (policy_frequency 2: two actor updates with their
alpha updates every other step), on HalfCheetah-v4's spaces read from the real env.

Why this can fail: a seed that reads another seed's draws, takes another seed's batch or
gradient, or misses a draw, trains differently. Checked by hand on this test's setup: with
seeds 0 and 1's generators swapped, or one generator shared by all seeds, their losses differ
by 4-160% and their actor weights by up to 4e-3, in 20-70% of the elements by more than 1e-4
(an Adam step is 3e-4 for the actor, 1e-3 for the critics). The batched arithmetic is the
autograd formulation's, so against it the seeds agree to a few roundings (the fused Adam kernel
rounds a stacked tensor's vectorised part and a short tensor's scalar tail differently): 1e-5
relative, 1e-7 absolute. The hand-written formulation rounds otherwise, and Adam's
normalisation amplifies that where a gradient is near zero (up to 2e-5 on 13 of 131,072 critic
weights here): 1e-4 relative and absolute, still under an Adam step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks import profile_step
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args
from sacbench.sac.batched import BatchedLearner, stack_batches
from sacbench.sac.fast_learner import FastLearner
from sacbench.training.envs import make_env

SEEDS = (1, 2, 3)
BATCH = 64
CPU = torch.device("cpu")
# (rtol, atol) per alone formulation: see the module docstring.
TOLERANCE = {"autograd": (1e-5, 1e-7), "handwritten": (1e-4, 1e-4)}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small products on a shared two-core machine: extra threads only wait on each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def spaces() -> tuple[int, np.ndarray, np.ndarray]:
    env = make_env("HalfCheetah-v4", seed=0)
    obs_dim = int(np.prod(env.observation_space.shape))
    low, high = env.action_space.low, env.action_space.high
    env.close()
    return obs_dim, low, high


def seed_learner(
    seed: int, spaces: tuple[int, np.ndarray, np.ndarray], *, gradients: str, **overrides: object
) -> tuple[FastLearner, torch.Tensor]:
    """Seed `seed`'s FastLearner as a trainer makes it, and the default generator's state
    after (where that seed's update draws start)."""
    obs_dim, low, high = spaces
    torch.manual_seed(seed)
    args = Args(seed=seed, batch_size=BATCH, **overrides)  # type: ignore[arg-type]
    learner = FastLearner(
        obs_dim=obs_dim, action_low=low, action_high=high, args=args, device=CPU,
        gradients=gradients,  # type: ignore[arg-type]
    )  # fmt: skip
    return learner, torch.get_rng_state()


def random_batch(generator: torch.Generator, obs_dim: int, low: np.ndarray) -> Batch:
    return profile_step.random_batch(
        obs_dim=obs_dim,
        action_dim=len(low),
        batch_size=BATCH,
        generator=generator,
        termination_rate=0.1,
    )


def batched_from(learners_and_states: list[tuple[FastLearner, torch.Tensor]]) -> BatchedLearner:
    generators = []
    for _, state in learners_and_states:
        generator = torch.Generator()
        generator.set_state(state)
        generators.append(generator)
    return BatchedLearner(
        learners=[learner for learner, _ in learners_and_states], generators=generators
    )


def learner_tensors(state: dict) -> dict[str, torch.Tensor]:
    """Every network tensor and optimizer state tensor of a FastLearner state dict, by name."""
    tensors = {"log_alpha": state["log_alpha"]}
    for net in ("actor", "critic", "target_critic"):
        tensors.update({f"{net}.{key}": value for key, value in state[net].items()})
    for optimizer in ("q_optimizer", "actor_optimizer", "alpha_optimizer"):
        for index, entries in state[optimizer]["state"].items():
            tensors.update({f"{optimizer}.{index}.{k}": v for k, v in entries.items()})
    return tensors


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, rtol: float, atol: float, *,
                 where: str) -> None:  # fmt: skip
    torch.testing.assert_close(
        ours, theirs, rtol=rtol, atol=atol, msg=lambda message: f"{where}: {message}"
    )


@pytest.mark.parametrize(
    ("gradients", "autotune"),
    [("autograd", True), ("autograd", False), ("handwritten", True)],  # handwritten: the default
)
def test_each_seed_in_the_batch_equals_that_seed_alone(spaces, gradients, autotune):
    overrides = {"autotune": autotune, "alpha": 0.3}
    alone = [seed_learner(seed, spaces, gradients=gradients, **overrides) for seed in SEEDS]
    batched = batched_from(
        [seed_learner(seed, spaces, gradients="autograd", **overrides) for seed in SEEDS]
    )
    rng_states = [state for _, state in alone]
    data = torch.Generator().manual_seed(7)
    rtol, atol = TOLERANCE[gradients]
    for global_step in range(5001, 5010):  # 9 steps: 8 actor and 8 alpha updates
        batches = [random_batch(data, spaces[0], spaces[1]) for _ in SEEDS]
        schedule = update_schedule(global_step, learning_starts=5000, policy_frequency=2,
                                   target_network_frequency=1)  # fmt: skip
        expected = []
        for index, (learner, _) in enumerate(alone):
            torch.set_rng_state(rng_states[index])
            metrics = learner.update(batches[index], schedule)
            expected.append({name: value.clone() for name, value in metrics.items()})
            rng_states[index] = torch.get_rng_state()
        got = batched.update(stack_batches(batches), schedule)
        for index, metrics in enumerate(expected):
            assert set(got) == set(metrics)
            for name, value in metrics.items():
                assert_close(got[name][index], value.reshape(()), rtol, atol,
                             where=f"seed {index} {name} at step {global_step}")  # fmt: skip
    assert "alpha_loss" in got if autotune else "alpha_loss" not in got
    for index, (learner, _) in enumerate(alone):
        theirs = learner_tensors(learner.state_dict())
        ours = learner_tensors(batched.seed_state_dict(index))
        assert ours.keys() == theirs.keys()
        for name, tensor in theirs.items():
            if gradients == "handwritten" and "optimizer" in name:
                continue  # gradient-sized: they differ by the formulations' gradient rounding
            assert_close(ours[name], tensor, rtol, atol, where=f"seed {index}: {name}")


def test_a_seed_read_back_continues_alone_as_its_fast_learner(spaces):
    """seed_state_dict is FastLearner's format: loaded into a FastLearner made from another
    seed, it continues seed 1 exactly as the batched learner continues it."""
    made = [seed_learner(seed, spaces, gradients="autograd") for seed in SEEDS]
    batched = batched_from(made)
    data = torch.Generator().manual_seed(3)
    steps = [update_schedule(step, learning_starts=5000, policy_frequency=2,
                             target_network_frequency=1) for step in range(5001, 5005)]  # fmt: skip
    for schedule in steps[:2]:
        batched.update(stack_batches([random_batch(data, *spaces[:2]) for _ in SEEDS]), schedule)
    continued, _ = seed_learner(99, spaces, gradients="autograd")
    continued.load_state_dict(batched.seed_state_dict(1))
    torch.set_rng_state(batched.generators[1].get_state())
    for schedule in steps[2:]:
        batches = [random_batch(data, *spaces[:2]) for _ in SEEDS]
        batched.update(stack_batches(batches), schedule)
        continued.update(batches[1], schedule)
    theirs = learner_tensors(continued.state_dict())
    ours = learner_tensors(batched.seed_state_dict(1))
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


def test_a_batch_of_learners_that_have_updated_reports_their_last_metrics(spaces):
    """A batch made from resumed learners reports what they last reported until it updates
    (a log point without an actor update repeats the last actor loss, as alone)."""
    made = [seed_learner(seed, spaces, gradients="autograd") for seed in SEEDS]
    data = torch.Generator().manual_seed(5)
    schedule = update_schedule(5002, learning_starts=5000, policy_frequency=2,
                               target_network_frequency=1)  # fmt: skip
    for learner, _ in made:
        learner.update(random_batch(data, *spaces[:2]), schedule)
    expected = [learner.metrics() for learner, _ in made]
    got = batched_from(made).metrics()
    assert set(got) == set(expected[0]) >= {"actor_loss", "alpha_loss", "qf_loss"}
    for index, metrics in enumerate(expected):
        for name, value in metrics.items():
            assert torch.equal(got[name][index], value.reshape(())), f"seed {index} {name}"
    del made[1][0].last["actor_loss"]  # as if it stood elsewhere (optimizer steps aside)
    with pytest.raises(ValueError, match=r"learners\[1\] has last metrics \['alpha_loss', 'c"):
        batched_from(made)


def test_batched_actions_come_from_each_seeds_generator(spaces):
    made = [seed_learner(seed, spaces, gradients="autograd") for seed in SEEDS]
    batched = batched_from(made)
    observations = torch.randn(len(SEEDS), 5, spaces[0], generator=torch.Generator())
    actions = batched.act(observations)
    for index, (learner, state) in enumerate(made):
        torch.set_rng_state(state)
        torch.testing.assert_close(actions[index], learner.act(observations[index]))


def test_bad_arguments_are_rejected_by_name(spaces):
    made = [seed_learner(seed, spaces, gradients="autograd") for seed in SEEDS]
    learners = [learner for learner, _ in made]
    with pytest.raises(ValueError, match="learners: a BatchedLearner needs at least one"):
        BatchedLearner(learners=[], generators=[])
    with pytest.raises(ValueError, match="generators: one per seed, got 2 for 3"):
        BatchedLearner(learners=learners, generators=[torch.Generator(), torch.Generator()])
    shared = torch.Generator()
    with pytest.raises(ValueError, match="generators: each seed needs its own"):
        BatchedLearner(learners=learners, generators=[shared] * 3)
    other, _ = seed_learner(4, spaces, gradients="autograd", gamma=0.9)
    with pytest.raises(ValueError, match=r"learners\[1\].args.gamma is 0.9"):
        BatchedLearner(learners=[learners[0], other], generators=[shared, torch.Generator()])
    batched = batched_from(made)
    batches = [random_batch(torch.Generator(), *spaces[:2]) for _ in SEEDS]
    schedule = update_schedule(5002, learning_starts=5000, policy_frequency=2,
                               target_network_frequency=1)  # fmt: skip
    with pytest.raises(
        ValueError, match=r"batch.observations must be shaped \[3, 64, 17\].* got \[2, 64, 17\]"
    ):
        batched.update(stack_batches(batches[:2]), schedule)  # two seeds' batches for three
    with pytest.raises(ValueError, match="batch.observations must be shaped"):
        batched.update(batches[0], schedule)  # one seed's batch, no seed axis
    short = Batch(**{**batches[2].__dict__, "actions": batches[2].actions[:10]})
    with pytest.raises(ValueError, match="the batches' actions differ in shape"):
        stack_batches([batches[0], batches[1], short])
    with pytest.raises(ValueError, match=r"seed must be an index in \[0, 3\), got 3"):
        batched.seed_state_dict(3)
