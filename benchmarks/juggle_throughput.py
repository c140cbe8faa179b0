"""Policy steps per second of the vectorized juggling env (10 physics substeps per step), policy
inference included, against a plain ``gymnasium.vector.SyncVectorEnv`` of the single env
(``robot_rl/QuadJuggle-v0``) with the same policy, measured in the same run.

    python benchmarks/juggle_throughput.py [--num-envs 4096] [--steps 40] [--reference-envs 16]
    python benchmarks/juggle_throughput.py --device cuda --num-envs 16384   # MuJoCo Warp on the GPU

The policy is the shipped one (``policies/quad_juggle``) when present, else an untrained network
of the same architecture (the cost is the same). Targets (issue 5): steps_per_s >= 20,000 and
ratio >= 5 on this 2-core machine. ``--physics`` picks the vector env's back end (auto: MuJoCo Warp on
a CUDA ``--device``, else mujoco.rollout on CPU threads). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import gymnasium as gym
import torch

import robot_rl.envs  # noqa: F401 - registers robot_rl/QuadJuggle-v0
from robot_rl.envs.juggle_task import OBS_DIM, PRIVILEGED_DIM
from robot_rl.envs.quad_juggle_vec import PHYSICS_BACKENDS, QuadJuggleVecEnv
from robot_rl.resources import package_path


def load_policy(device: str):
    """(obs tensor -> action tensor, description)."""
    from robot_rl.agents.ppo import ActorCritic, DeployedPolicy, PPOConfig

    try:
        deployed = DeployedPolicy.load(package_path("policies/quad_juggle"), device=device)
        return deployed, "shipped policies/quad_juggle"
    except FileNotFoundError:
        net = ActorCritic(OBS_DIM, OBS_DIM + PRIVILEGED_DIM, 4, PPOConfig()).to(device).eval()
        return (lambda obs: net.act_inference(obs).clamp(-1, 1)), "untrained PPOConfig() network"


def measure_vector_env(policy, num_envs: int, steps: int, device: str, physics: str) -> tuple[float, str]:
    env = QuadJuggleVecEnv(num_envs, device=device, seed=0, physics=physics)
    backend = type(env.core.physics).__name__
    obs, _ = env.reset()
    with torch.inference_mode():
        for _ in range(3):  # warm-up
            obs = env.step(policy(obs["policy"]))[0]
        started = time.perf_counter()
        for _ in range(steps):
            obs = env.step(policy(obs["policy"]))[0]
        elapsed = time.perf_counter() - started
    env.close()
    return num_envs * steps / elapsed, backend


def measure_sync_vector_env(policy, num_envs: int, steps: int, device: str) -> float:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("robot_rl/QuadJuggle-v0") for _ in range(num_envs)])
    obs, _ = env.reset(seed=0)
    with torch.inference_mode():
        def act(o):
            return policy(torch.as_tensor(o, device=device)).cpu().numpy()
        for _ in range(3):
            obs = env.step(act(obs))[0]
        started = time.perf_counter()
        for _ in range(steps):
            obs = env.step(act(obs))[0]
        elapsed = time.perf_counter() - started
    env.close()
    return num_envs * steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--reference-envs", type=int, default=16)
    parser.add_argument("--reference-steps", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--physics", default="auto", choices=PHYSICS_BACKENDS)
    parser.add_argument("--quick", action="store_true", help="512 quadrotors, 10 steps (same measurement, shorter)")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.steps, args.reference_steps = 512, 10, 30
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    policy, description = load_policy(args.device)
    ours, backend = measure_vector_env(policy, args.num_envs, args.steps, args.device, args.physics)
    print(f"vectorized env ({args.num_envs} quadrotors, {backend}): {ours:,.0f} policy steps/s")
    reference = measure_sync_vector_env(policy, args.reference_envs, args.reference_steps, args.device)
    print(f"gymnasium SyncVectorEnv ({args.reference_envs} x robot_rl/QuadJuggle-v0): {reference:,.0f} policy steps/s")
    result = {"steps_per_s": round(ours, 1), "reference_steps_per_s": round(reference, 1),
              "ratio": round(ours / reference, 2), "num_envs": args.num_envs, "policy": description,
              "device": args.device, "physics": backend, "cpus": len(os.sched_getaffinity(0)), "quick": args.quick,
              "meets_targets": bool(ours >= 20_000 and ours / reference >= 5)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
