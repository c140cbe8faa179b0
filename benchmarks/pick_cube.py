"""Arm pick-cube from pixels: success over 50 evaluation episodes versus environment steps.

Task: `robot_rl/ArmPickCube-v0`, 64x64 front + wrist cameras plus proprioception (no cube
pose), sparse reward (1 on lifting the cube, which ends the episode), 20 scripted
demonstrations, scenes randomized with the train ranges of `sim/arm/randomization.yaml`;
evaluation on its eval ranges. Agent: SAC + RLPD on the frozen pretrained encoder shipped in
`policies/encoders/arm_pick_cube_64` (features computed once per observation), HIL-SERL's
grasp critic for the gripper. Target: >= 90 % within 20k steps, median of 3 seeds.

    python benchmarks/pick_cube.py [--quick] [--seeds 0 1 2] [--interventions] [--state]

`--state` runs the state-based variant (privileged lift state + gripper command instead of cameras, 10k steps).
Writes pick_cube[_state][_interventions].png (success versus steps per seed) and prints one
JSON line per evaluation, then the summary as the last line: {"success", "steps", ...} where
`success` is the median final success rate and `steps` the median number of environment
steps at which a seed first reached 90 % (null if most seeds never did).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml

import robot_rl.envs  # noqa: F401 - registers the environments
from robot_rl.agents.encoders import pretrained_config
from robot_rl.agents.sac import SACConfig
from robot_rl.envs.adapter import AdapterConfig
from robot_rl.tasks import expert_for_env
from robot_rl.training.gym_loop import GymTrainConfig, Trainer
from robot_rl.teleop.scripted_human import ScriptedIntervener

ROOT = Path(__file__).resolve().parents[1]
ENCODER = ROOT / "policies" / "encoders" / "arm_pick_cube_64"
WIDE_CONFIG = ROOT / "config" / "arm_pick_cube_wide.yaml"
"""The wide variant's task config: its cube range (30 x 30 cm, any yaw) and the encoder pretrained on it."""
ENV_ID = "robot_rl/ArmPickCube-v0"


def config_for(seed: int, steps: int, state: bool, eval_every: int, eval_episodes: int,
               wide: bool = False) -> GymTrainConfig:
    """`wide`: the arm_pick_cube_wide variant (the cube anywhere in 30 x 30 cm, its own encoder)."""
    encoder_dir, scene = ENCODER, {}
    if wide:
        wide_config = yaml.safe_load(WIDE_CONFIG.read_text())
        scene = {"cube_xy_range": wide_config["arm_sim"]["ros__parameters"]["cube_xy_range"]}
        encoder_dir = ROOT / wide_config["learner"]["ros__parameters"]["encoder"]
    env_kwargs = {"image_size": 64, "randomization_split": "train", **scene}
    if state:
        env_kwargs["observation"] = "state"
    sac = SACConfig(num_critics=2, utd_ratio=2, batch_size=256, discount=0.97, grasp_critic=True,
                    precision="auto", compile=False)
    encoder = None if state else pretrained_config(encoder_dir, state_dim=_state_dim(env_kwargs))
    return GymTrainConfig(ENV_ID, env_kwargs=env_kwargs, eval_env_kwargs={"randomization_split": "eval", **scene},
                          total_steps=steps, seed=seed, sac=sac, encoder=encoder, demo_episodes=20,
                          demo_noise=0.1, warmup_steps=500, updates_per_step=1.0, eval_every=eval_every,
                          eval_episodes=eval_episodes,
                          # The recorded rows predate state normalisation (the arm's state is in unit scale
                          # already, and the grasp critic's "stay" reads the raw gripper entry's sign).
                          adapter=AdapterConfig(normalize_state="off"))


def _state_dim(env_kwargs: dict) -> int:
    import gymnasium as gym

    env = gym.make(ENV_ID, **env_kwargs)
    dim = env.observation_space["state"].shape[0]
    env.close()
    return dim


def plot(curves: dict[int, list[dict]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for seed, rows in curves.items():
        ax.plot([r["steps"] for r in rows], [100 * r["success_rate"] for r in rows], marker="o", label=f"seed {seed}")
    ax.axhline(90, color="grey", linestyle="--", linewidth=1, label="target 90 %")
    ax.set(xlabel="environment steps", ylabel="evaluation success (%)", title=title, ylim=(-2, 102))
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 3k steps, 10 evaluation episodes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="environment steps (default 20k pixels, 10k state)")
    parser.add_argument("--state", action="store_true", help="state-based variant")
    parser.add_argument("--interventions", action="store_true", help="a scripted human corrects the policy")
    parser.add_argument("--out", default=".", help="directory for the PNG")
    args = parser.parse_args()
    steps = args.steps or (3_000 if args.quick else 10_000 if args.state else 20_000)
    seeds = args.seeds[:1] if args.quick else args.seeds
    eval_episodes = 10 if args.quick else 50
    torch.set_num_threads(max(1, torch.get_num_threads()))
    expert = expert_for_env(ENV_ID)
    curves: dict[int, list[dict]] = {}
    start = time.perf_counter()
    for seed in seeds:
        config = config_for(seed, steps, args.state, max(steps // 10, 500), eval_episodes)
        intervener = ScriptedIntervener(expert) if args.interventions else None
        trainer = Trainer(config, expert=expert, intervener=intervener,
                          log=lambda row, s=seed: print(json.dumps({"seed": s, **row}), flush=True))
        curves[seed] = trainer.run()
    name = "pick_cube" + ("_state" if args.state else "") + ("_interventions" if args.interventions else "")
    png = Path(args.out) / f"{name}.png"
    plot(curves, png, f"{'state' if args.state else 'pixel'} pick-cube, eval ranges")
    print(json.dumps({**summarize(curves), "total_steps": steps, "wall_s": round(time.perf_counter() - start, 1),
                      "png": str(png), "variant": "state" if args.state else "pixels",
                      "interventions": args.interventions}))


def summarize(curves: dict[int, list[dict]]) -> dict:
    """`success`: median final success rate; `steps`: median over seeds of the first evaluation at
    >= 90 % (a seed that never got there counts as never, so the median exists if most seeds did)."""
    finals = [rows[-1]["success_rate"] for rows in curves.values()]
    reached = [next((r["steps"] for r in rows if r["success_rate"] >= 0.9), None) for rows in curves.values()]
    median_steps = statistics.median(r if r is not None else float("inf") for r in reached)
    return {"success": statistics.median(finals), "steps": median_steps if median_steps != float("inf") else None,
            "best_success": statistics.median(max(r["success_rate"] for r in rows) for rows in curves.values()),
            "per_seed_success": finals, "per_seed_steps_to_90": reached}


if __name__ == "__main__":
    main()
