"""One PPO update round, ours (the juggling PPO) against rsl-rl-lib's PPO, same rollout and network sizes.

Used by `learner_throughput.py`. Both fill their own rollout storage through their own `act` /
`process_env_step` / `compute_returns` with the same random observations, rewards and dones (not
timed), then time `update()`: the juggling round (2048 envs x 24 steps, 4 epochs x 4 minibatches)
with 128x128x128 ELU actor and critic, a 32-entry policy and 41-entry critic observation, 4
actions. rsl-rl-lib's models at its defaults apart from those sizes (its observation
normalisation on, as ours).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from robot_rl.agents.ppo import PPO
from robot_rl.robots.quad.juggling import OBS_DIM, PRIVILEGED_DIM
from robot_rl.robots.quad.train import JuggleTrainConfig

ACTIONS = 4


def _rollouts(num_envs: int, steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                       torch.Tensor]]:
    """(policy obs, critic obs, reward, done) per step, shared by both contenders."""
    g = torch.Generator().manual_seed(seed)
    critic_dim = OBS_DIM + PRIVILEGED_DIM
    return [(torch.randn(num_envs, OBS_DIM, generator=g), torch.randn(num_envs, critic_dim, generator=g),
             torch.randn(num_envs, generator=g), torch.rand(num_envs, generator=g) < 0.01) for _ in range(steps + 1)]


def ours(num_envs: int, device: torch.device) -> tuple[Callable[[], object], PPO]:
    config = JuggleTrainConfig().ppo
    ppo = PPO(OBS_DIM, OBS_DIM + PRIVILEGED_DIM, ACTIONS, num_envs, config, device)
    data = _rollouts(num_envs, config.num_steps_per_env)
    with torch.no_grad():
        for obs, critic_obs, reward, done in data[:-1]:
            ppo.act(obs.to(device), critic_obs.to(device))
            ppo.process_env_step(reward.to(device), done.to(device), torch.zeros_like(done).to(device))
        ppo.compute_returns(data[-1][1].to(device))
    return ppo.update, ppo


def rsl_rl(num_envs: int, device: torch.device) -> Callable[[], object]:
    from rsl_rl.algorithms import PPO as RslPPO
    from rsl_rl.models import MLPModel
    from rsl_rl.storage import RolloutStorage
    from tensordict import TensorDict

    config = JuggleTrainConfig().ppo
    data = _rollouts(num_envs, config.num_steps_per_env)

    def observation(obs, critic_obs):
        return TensorDict({"policy": obs, "critic": critic_obs}, batch_size=[num_envs], device=device)

    first = observation(*data[0][:2])
    groups = {"actor": ["policy"], "critic": ["critic"]}
    hidden = list(config.actor_hidden)
    actor = MLPModel(first, groups, "actor", ACTIONS, hidden, config.activation, obs_normalization=True,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": config.init_noise_std})
    critic = MLPModel(first, groups, "critic", 1, list(config.critic_hidden), config.activation, obs_normalization=True)
    storage = RolloutStorage("rl", num_envs, config.num_steps_per_env, first, [ACTIONS], str(device))
    ppo = RslPPO(actor, critic, storage, num_learning_epochs=config.num_learning_epochs,
                 num_mini_batches=config.num_mini_batches, clip_param=config.clip_param, gamma=config.gamma,
                 lam=config.lam, value_loss_coef=config.value_loss_coef, entropy_coef=config.entropy_coef,
                 learning_rate=config.learning_rate, max_grad_norm=config.max_grad_norm,
                 schedule=config.schedule, desired_kl=config.desired_kl, device=str(device))
    with torch.no_grad():
        for obs, critic_obs, reward, done in data[:-1]:
            ppo.act(observation(obs, critic_obs))
            ppo.process_env_step(observation(obs, critic_obs), reward.to(device), done.to(device), {})
        ppo.compute_returns(observation(*data[-1][:2]))
    return ppo.update


def describe() -> dict:
    config = JuggleTrainConfig().ppo
    return {"ours": "PPO.update as `robot-rl juggle train` runs it (LayerNorm MLPs, compiled losses: "
                    f"compile={config.compile})","rollout": f"2048 envs x {config.num_steps_per_env} steps",
            "update": f"{config.num_learning_epochs} epochs x {config.num_mini_batches} minibatches",
            "network": f"actor {list(config.actor_hidden)}, critic {list(config.critic_hidden)} {config.activation}",
            "config": {k: v for k, v in dataclasses.asdict(config).items() if not isinstance(v, (list, tuple))}}
