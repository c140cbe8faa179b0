"""An established third-party suite through `robot-rl train --env`, against stable-baselines3's SAC on the same task.

Suite: Gymnasium-Robotics (Farama), the one that installs beside our pins (`pip install -e '.[suites]'`;
Meta-World, gym-aloha, robosuite, gym-pusht and ManiSkill downgrade MuJoCo or numpy or clash with
OpenCV, see README). Its Fetch and Franka Kitchen tasks do not run on MuJoCo 4 (gymnasium-robotics
1.4.2 compares MuJoCo's joint-type enums with numpy integers, which MuJoCo 4 answers False); its
PointMaze tasks do. Task: `PointMaze_UMaze-v3` with `continuing_task=False` (the env's own option,
given through --env-kwargs): a point mass must reach a goal drawn anew each episode in a U-shaped
maze from a start drawn anew, 300 steps, sparse reward (1 on reaching the goal, which ends the
episode). Neither trivial nor out of reach at this budget: random actions reach the goal in about a
quarter of the episodes, goals in the other arm of the U need the way round the wall, and the
observation is the suite's nested goal Dict (observation, achieved_goal, desired_goal; unbounded).

Ours: the real command, `robot-rl train --env gymnasium_robotics:PointMaze_UMaze-v3 --env-kwargs ...`
with its defaults (SAC 256x256, no demonstrations: the suite has no scripted expert), read back from
the run's history.json. Peer: stable-baselines3 SAC, `MultiInputPolicy`, its defaults (net_arch
256x256), seeded as Gymnasium does. Both get the same environment steps and are evaluated by the
same rule on the same episodes: `eval_episodes` deterministic episodes whose resets are seeded from
10_000 + seed (robot_rl.training.evaluate.evaluate_policy, the evaluation `train --env` runs), an
episode a success if the suite's info["success"] was set at any step; at every `eval_every` steps
and at the end. Seeds alternate ours, peer, ours, ... so both see the same machine.

    python benchmarks/suite_peer.py [--quick] [--seeds 0 1 2] [--steps 30000]

Writes benchmarks/results/suite_peer.json (the last line) and suite_peer.png (success against
steps, per seed and library); `--quick` (one seed, 2,000 steps, 10 episodes) writes neither.
Last line: {"ours_success", "peer_success" (medians over seeds of the final evaluation),
"success_ratio_vs_sb3", "per_seed", "failures", "steps", "versions", ...}.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from robot_rl.device import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ENV_ID = "gymnasium_robotics:PointMaze_UMaze-v3"
ENV_KWARGS = {"continuing_task": False}
PEER = "stable-baselines3"


def versions() -> dict[str, str | None]:
    out = {}
    for package in ("gymnasium-robotics", "gymnasium", "mujoco", PEER, "torch", "numpy"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    out["robot_rl"] = done.stdout.strip() or None
    return out


def run_ours(seed: int, steps: int, eval_every: int, episodes: int, run_dir: Path) -> list[dict]:
    """`robot-rl train --env` in its own process; its learning curve from history.json."""
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "--env", ENV_ID, "--env-kwargs", json.dumps(ENV_KWARGS),
           "--steps", str(steps), "--seed", str(seed), "--eval-episodes", str(episodes),
           "--set", f"eval_every={eval_every}", "--run-dir", str(run_dir)]
    errors = run_dir.with_name(f"{run_dir.name}.stderr")
    with open(errors, "w") as stderr, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                                       cwd=ROOT) as process:
        for line in process.stdout:  # its evaluation rows, as they come
            if line.startswith("{"):
                print(json.dumps({"library": "ours", "seed": seed, **json.loads(line)}), flush=True)
    if process.returncode != 0:
        raise RuntimeError(f"robot-rl train exited {process.returncode}: {errors.read_text().strip()[-2000:]}")
    return [{"steps": row["steps"], "success_rate": row["success_rate"], "mean_return": row["mean_return"],
             "wall_s": row["wall_s"]} for row in json.loads((run_dir / "history.json").read_text())]


def run_peer(seed: int, steps: int, eval_every: int, episodes: int) -> list[dict]:
    """stable-baselines3 SAC with its defaults on the suite's env, evaluated at the same steps by the same rule."""
    import gymnasium as gym
    import gymnasium_robotics  # noqa: F401 - registers the suite's environments
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    from robot_rl.envs.adapter import EnvAdapter
    from robot_rl.training.evaluate import evaluate_policy

    env_id = ENV_ID.partition(":")[2]

    class SuccessFlag(gym.Wrapper):
        """The suite's env with info["is_success"] read as our adapter reads it (one rule for both)."""

        def __init__(self, env: gym.Env):
            super().__init__(env)
            self.adapter = EnvAdapter.for_env(env)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward, terminated, truncated, {**info, "is_success": self.adapter.success(info)}

    start = time.perf_counter()
    curve: list[dict] = []

    def evaluate(model) -> None:
        act = lambda obs, info: model.predict(obs, deterministic=True)[0]  # noqa: E731
        result = evaluate_policy(act, SuccessFlag(gym.make(env_id, **ENV_KWARGS)), episodes, seed=10_000 + seed)
        curve.append({"steps": model.num_timesteps, "success_rate": result["success_rate"],
                      "mean_return": result["mean_return"], "wall_s": round(time.perf_counter() - start, 1)})
        print(json.dumps({"library": "peer", "seed": seed, **curve[-1]}), flush=True)

    class Checkpoints(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0 and self.num_timesteps < steps:
                evaluate(self.model)
            return True

    env = gym.make(env_id, **ENV_KWARGS)
    model = SAC("MultiInputPolicy", env, policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu")
    model.set_logger(Logger(None, []))  # its default logger would leave a /tmp/SB3-<date> folder per run
    model.learn(total_timesteps=steps, callback=Checkpoints())
    evaluate(model)
    env.close()
    return curve


def plot(curves: dict[str, dict[int, list[dict]]], path: Path, steps: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for library, style in (("ours", "-"), ("peer", "--")):
        for seed, rows in curves[library].items():
            ax.plot([r["steps"] for r in rows], [100 * r["success_rate"] for r in rows], style, marker="o",
                    label=f"{'robot_rl' if library == 'ours' else PEER} seed {seed}")
    ax.set(xlabel="environment steps", ylabel="evaluation success (%)", ylim=(-2, 102),
           title=f"{ENV_ID.partition(':')[2]} {ENV_KWARGS}, {steps} steps")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summarize(curves: dict[str, dict[int, list[dict]]], failures: dict[str, list[dict]]) -> dict[str, Any]:
    finals = {lib: {seed: rows[-1]["success_rate"] for seed, rows in runs.items()} for lib, runs in curves.items()}
    median = {lib: statistics.median(values.values()) if values else None for lib, values in finals.items()}
    ours, peer = median["ours"], median["peer"]
    return {"ours_success": ours, "peer_success": peer,
            # None where it is undefined: a library without a finished seed, or a peer at 0 % (then ours >= it)
            "success_ratio_vs_sb3": round(ours / peer, 3) if ours is not None and peer else None,
            "ours_at_least_peer": ours is not None and peer is not None and ours >= peer,
            "per_seed": {lib: {str(seed): value for seed, value in values.items()} for lib, values in finals.items()},
            "per_seed_wall_s": {lib: {str(seed): rows[-1]["wall_s"] for seed, rows in runs.items()}
                                for lib, runs in curves.items()},
            "curves": {lib: {str(seed): rows for seed, rows in runs.items()} for lib, runs in curves.items()},
            "failures": {lib: len(items) for lib, items in failures.items()}, "failure_reasons": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 2,000 steps, 10 evaluation episodes")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30_000, help="environment steps per run, both libraries")
    parser.add_argument("--eval-every", type=int, help="steps between evaluations (default: steps / 6)")
    parser.add_argument("--eval-episodes", type=int, default=50)
    args = parser.parse_args()
    steps = 2_000 if args.quick else args.steps
    seeds = args.seeds[:1] if args.quick else args.seeds
    episodes = 10 if args.quick else args.eval_episodes
    eval_every = args.eval_every or max(steps // 6, 500)
    if steps < 1 or episodes < 1 or eval_every < 1:
        parser.error("--steps, --eval-every and --eval-episodes must be positive")
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    curves: dict[str, dict[int, list[dict]]] = {"ours": {}, "peer": {}}
    failures: dict[str, list[dict]] = {"ours": [], "peer": []}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="suite_peer_") as runs:
        for seed in seeds:
            for library in ("ours", "peer"):
                try:
                    rows = (run_ours(seed, steps, eval_every, episodes, Path(runs) / f"ours_{seed}")
                            if library == "ours" else run_peer(seed, steps, eval_every, episodes))
                except Exception as exc:  # a failed seed is counted and reported, the others still run
                    failures[library].append({"seed": seed, "error": f"{type(exc).__name__}: {exc}"[-500:]})
                    print(json.dumps({"library": library, "seed": seed, "failed": failures[library][-1]["error"]}),
                          flush=True)
                    continue
                curves[library][seed] = rows
                print(json.dumps({"library": library, "seed": seed, "curve": rows}), flush=True)
    summary = {**summarize(curves, failures), "env_id": ENV_ID, "env_kwargs": ENV_KWARGS, "steps": steps,
               "eval_every": eval_every, "eval_episodes": episodes, "seeds": seeds, "peer": PEER,
               "versions": versions(), "cpu": cpu_model(), "wall_s": round(time.perf_counter() - start, 1)}
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        plot(curves, RESULTS / "suite_peer.png", steps)
        (RESULTS / "suite_peer.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
