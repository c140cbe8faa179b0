"""End to end learning, small enough for CI: the same actor and learner cores as the ROS graph,
in one process, on the simulated arm lift task with 20 scripted demonstrations."""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from robot_rl.agents.sac import SACConfig
from robot_rl.robots.arm.sim import ArmSim
from robot_rl.tasks import get_task
from robot_rl.training.actor import ActorConfig, ActorCore
from robot_rl.training.learner import LearnerConfig, LearnerCore
from robot_rl.training.in_process import collect_demonstrations, train_in_process
from robot_rl.transport.outbox import Outbox


def _lift_in_3000_steps(tmp_path, seed: int) -> tuple[dict, dict, float]:
    """(untrained evaluation, evaluation after 3000 steps, the learner's final alpha) for one seed."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    task, sim = get_task("arm_lift"), ArmSim()
    demos, _ = collect_demonstrations(task, sim, 20, seed=100, noise=0.1)
    config = LearnerConfig(task.obs_dim, task.action_dim, SACConfig(utd_ratio=2, discount=0.97, batch_size=128),
                           warmup_transitions=500, seed=seed)
    learner = LearnerCore(config, tmp_path / f"learner{seed}")
    learner.load_demonstrations(demos)

    untrained = ActorCore(task, ActorConfig(total_steps=0, eval_episodes=10, seed=seed), Outbox(tmp_path / f"u{seed}"))
    untrained.evaluating = True
    baseline = train_in_process(sim, untrained, learner, updates_per_step=0.0, seed=seed)

    actor = ActorCore(task, ActorConfig(total_steps=3000, eval_episodes=10, seed=seed), Outbox(tmp_path / f"o{seed}"))
    result = train_in_process(sim, actor, learner, updates_per_step=1.0, seed=seed)
    sim.close()
    return baseline, result, learner.agent.alpha.item()


def test_sac_rlpd_learns_to_lift_the_cube_in_3000_steps(tmp_path):
    # The mean of two seeds: one seed's outcome at 3000 steps depends on the CPU's float kernels
    # (seed 0 reaches 50 % success on AVX2 machines, 17-20 % and a return of 10.5 on AVX-512
    # ones, where seed 1 reaches 60 % and 27); random actions score ~2 and never lift.
    # The seeds are independent and each keeps to one thread: one process each, side by side.
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(_lift_in_3000_steps, [tmp_path, tmp_path], (0, 1)))
    for baseline, _, alpha in runs:
        assert baseline["success_rate"] == 0.0 and baseline["mean_return"] < 5.0
        assert np.isfinite(alpha)
    results = [result for _, result, _ in runs]
    assert np.mean([r["success_rate"] for r in results]) >= 0.3, results
    assert np.mean([r["mean_return"] for r in results]) >= 15.0, results
