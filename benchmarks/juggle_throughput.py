"""Policy steps per second of the vectorized juggling env (10 physics substeps per step), policy
inference included, against a plain ``gymnasium.vector.SyncVectorEnv`` of the single env
(``robot_rl/QuadJuggle-v0``) with the same policy, measured in the same run.

    python benchmarks/juggle_throughput.py [--num-envs 4096] [--steps 40] [--reference-envs 16]
    python benchmarks/juggle_throughput.py --device cuda --num-envs 4096 32768 --out results.json   # MJX on the GPU

On MJX (``--physics mjx``, the default on a CUDA device when installed) every size is also measured
against the raw physics of the same batched model on the same device (``raw_physics_steps_per_s``:
ten bare MJX steps per policy step, constant rotor thrusts, no controller, task or policy), and
``ratio_vs_raw_physics`` is the env's share of it. Issue 43's targets on a GPU: >= 1,000,000 policy
steps/s with the controller on the device, >= 0.7 of the raw physics.

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
from robot_rl.robots.quad.juggling import OBS_DIM, PRIVILEGED_DIM
from robot_rl.robots.quad.backends import make_vec_env
from robot_rl.robots.quad.vec_env import PHYSICS_BACKENDS
from robot_rl.resources import package_path


def load_policy(device: str):
    """(n -> a policy acting on n streams of observations, description). The shipped policy acts as it deploys:
    a stream per quadrotor keeping its window of observations (a memory policy's), reset as its episode ends."""
    from robot_rl.agents.ppo import ActorCritic, DeployedPolicy, PPOConfig

    try:
        deployed = DeployedPolicy.load(package_path("policies/quad_juggle"), device=device)
        return deployed.stream, f"shipped policies/quad_juggle ({deployed.history_steps}-step window)"
    except FileNotFoundError:
        net = ActorCritic(OBS_DIM, OBS_DIM + PRIVILEGED_DIM, 4, PPOConfig()).to(device).eval()
        return (lambda n: lambda obs: net.act_inference(obs).clamp(-1, 1)), "untrained PPOConfig() network"


def step(env, act, obs):
    """One step of `env` with `act`'s actions for `obs` (the policy's part of the env's observation); the streams
    whose episode ended start a new window. Returns the env's next observation."""
    obs, _, terminated, truncated = env.step(act(obs))[:4]
    if hasattr(act, "reset"):
        act.reset(torch.as_tensor(terminated | truncated))
    return obs


def measure_vector_env(policy_for, num_envs: int, steps: int, device: str, physics: str) -> dict:
    """Policy steps/s of the vector env with the policy in the loop (and, on MJX, of its raw physics)."""
    env = make_vec_env(num_envs, device=device, seed=0, physics=physics)
    act = policy_for(num_envs)
    backend = type(env.core.physics).__name__ if hasattr(env, "core") else "MJX (JAX, whole env on the device)"
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    started = time.perf_counter()
    obs, _ = env.reset()
    with torch.inference_mode():
        for _ in range(3):  # warm-up (MJX and torch compile here)
            obs = step(env, act, obs["policy"])
        sync()
        warmup_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(steps):
            obs = step(env, act, obs["policy"])
        sync()
        elapsed = time.perf_counter() - started
    result = {"num_envs": num_envs, "steps_per_s": round(num_envs * steps / elapsed, 1), "physics": backend,
              "warmup_s": round(warmup_s, 1)}
    if hasattr(env, "env"):  # MJX: the raw physics of the same batched model, same device
        import jax

        mjx_env = env.env
        ctrl = jax.numpy.full((num_envs, 4), 2.5)
        data = mjx_env.raw_physics(ctrl)
        data = jax.block_until_ready(mjx_env.raw_physics(ctrl, data))  # compiled for its own output's types too
        started = time.perf_counter()
        for _ in range(steps):
            data = mjx_env.raw_physics(ctrl, data)
        jax.block_until_ready(data)
        raw = num_envs * steps / (time.perf_counter() - started)
        result.update(raw_physics_steps_per_s=round(raw, 1),
                      ratio_vs_raw_physics=round(result["steps_per_s"] / raw, 3))
    env.close()
    print(f"vectorized env ({num_envs} quadrotors, {backend}): {result['steps_per_s']:,.0f} policy steps/s"
          + (f", raw physics {result['raw_physics_steps_per_s']:,.0f}/s -> {result['ratio_vs_raw_physics']:.2f}"
             if "raw_physics_steps_per_s" in result else ""), flush=True)
    return result


def measure_sync_vector_env(policy_for, num_envs: int, steps: int, device: str) -> float:
    env = gym.vector.SyncVectorEnv([lambda: gym.make("robot_rl/QuadJuggle-v0") for _ in range(num_envs)])
    obs, _ = env.reset(seed=0)
    policy = policy_for(num_envs)
    with torch.inference_mode():
        def act(o):
            return policy(torch.as_tensor(o, device=device)).cpu().numpy()
        if hasattr(policy, "reset"):
            act.reset = policy.reset
        for _ in range(3):
            obs = step(env, act, obs)
        started = time.perf_counter()
        for _ in range(steps):
            obs = step(env, act, obs)
        elapsed = time.perf_counter() - started
    env.close()
    return num_envs * steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4096], help="one or more sizes")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--reference-envs", type=int, default=16)
    parser.add_argument("--reference-steps", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--physics", default="auto", choices=PHYSICS_BACKENDS)
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--quick", action="store_true", help="512 quadrotors, 10 steps (same measurement, shorter)")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.steps, args.reference_steps = [512], 10, 30
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    policy_for, description = load_policy(args.device)
    sizes = [measure_vector_env(policy_for, n, args.steps, args.device, args.physics) for n in args.num_envs]
    reference = measure_sync_vector_env(policy_for, args.reference_envs, args.reference_steps, args.device)
    print(f"gymnasium SyncVectorEnv ({args.reference_envs} x robot_rl/QuadJuggle-v0): {reference:,.0f} policy steps/s")
    ours = sizes[-1]["steps_per_s"]
    result = {"steps_per_s": ours, "reference_steps_per_s": round(reference, 1), "ratio": round(ours / reference, 2),
              "num_envs": args.num_envs[-1], "sizes": sizes, "policy": description, "device": device_name(args.device),
              "physics": sizes[-1]["physics"], "cpus": len(os.sched_getaffinity(0)), "quick": args.quick,
              "torch": torch.__version__}
    if str(args.device).startswith("cuda"):
        result["meets_gpu_targets"] = bool(ours >= 1_000_000 and sizes[-1].get("ratio_vs_raw_physics", 0.0) >= 0.7)
    else:
        result["meets_targets"] = bool(ours >= 20_000 and ours / reference >= 5)
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "cpu"


if __name__ == "__main__":
    main()
