"""gym-hil's Panda pick-cube: a scripted expert, and how often it succeeds with the cube placed at random.

`PickCubeExpert` is an expert as robot_rl/training/experts.py loads it (`--expert gym_hil_expert:PickCubeExpert`
with PYTHONPATH=benchmarks): called with
`gym_hil/PandaPickCube-v0`'s own observation and info, it returns that environment's action, end-effector deltas in
[-1, 1] (x `DEFAULT_EE_STEP_SIZE` metres) and the gripper in [0, 2] (0 opens, 2 closes, 1 holds). It reads

* the end effector, the pinch point between the fingertips, from `agent_pos[15:18]` (gym-hil's robot state:
  7 joint positions, 7 joint velocities, the gripper command, the pinch position);
* the cube from `environment_state` where the environment gives it (state observations); with image observations
  gym-hil gives no cube position, so it finds the cube's purple pixels in the `front` camera once the hand has
  risen out of their way, and casts their centre onto the plane of the cube's centre through that camera as
  gym-hil's own scene places it (read from the installed package's MJCF, not copied).

Phases: rise, over the cube, descend, close, lift (the environment ends the episode on success: the cube 10 cm
up, between the fingers).

    python benchmarks/gym_hil_expert.py [--episodes 20] [--seed 0] [--quick]

Runs in `make gym-hil-env`'s venv (gym-hil pins MuJoCo below 3.9). Episodes run through robot_rl's adapter
(`run_expert_episode`, the loop `robot-rl record --env --expert` records), seeded with `seeded_reset` (gym-hil
draws the cube from NumPy's global random state). Measured: the success rate with pixels and a random cube, and
against it the same expert given the cube's true position (state observations), the reference a perfect
localisation would reach; and the localisation's error. `--quick`: 5 episodes each, nothing written; otherwise the
last line is also written to benchmarks/results/gym_hil_expert.json.
Last line: {"success_rate", "reference_success_rate", "cube_error_mm_median", "cube_error_mm_max",
"mean_steps", "episodes", ...}.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import time
from pathlib import Path

import numpy as np

ENV_ID = "gym_hil/PandaPickCube-v0"
PIXEL_KWARGS = {"image_obs": True, "random_block_position": True, "reset_delay_seconds": 0}
STATE_KWARGS = {"random_block_position": True, "reset_delay_seconds": 0}
RESULTS = Path(__file__).resolve().parent / "results"

TCP = slice(15, 18)
"""The pinch point's position in gym-hil's `agent_pos`."""
OPEN, HOLD, CLOSE = 0.0, 1.0, 2.0
"""Gripper actions: gym-hil adds (action - 1) to its gripper command in [0, 1] (1 is closed)."""


class PickCubeExpert:
    """Picks the cube (see the module). Heights are the pinch point's above the table, in metres."""

    look_height = 0.2
    """The hand rises to this height before anything else: the front camera then sees the whole cube."""
    approach_height = 0.12
    """Over the cube the hand descends from this height."""
    grasp_depth = 0.0
    """The pinch point's height relative to the cube's centre when the fingers close."""
    lift_height = 0.3
    close_steps = 5
    """Steps the hand holds still while the fingers close."""
    tolerance = 0.008
    """How close (m) to a waypoint counts as there."""
    min_cube_share = 20 / 128**2
    """A smaller share of the front camera's pixels purple (20 of gym-hil's 128 x 128): the cube is (partly)
    hidden, look again next step."""

    def __init__(self):
        import mujoco
        from gym_hil.wrappers.hil_wrappers import DEFAULT_EE_STEP_SIZE

        model = mujoco.MjModel.from_xml_path(str(_scene_path()))
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        camera = model.camera("front").id
        self.camera_position = data.cam_xpos[camera].copy()
        self.camera_rotation = data.cam_xmat[camera].reshape(3, 3).copy()
        self.camera_fovy = float(model.cam_fovy[camera])
        self.cube_half_size = float(model.geom("block").size[2])
        self.step_size = np.array([DEFAULT_EE_STEP_SIZE[axis] for axis in "xyz"])
        self.reset()

    def reset(self) -> None:
        self.phase = "rise"
        self.cube: np.ndarray | None = None
        """The cube's centre (x, y, z) as found this episode."""
        self.closed_for = 0

    def __call__(self, observation, info) -> np.ndarray:
        hand = np.asarray(observation["agent_pos"], np.float64)[TCP]
        if "environment_state" in observation:
            self.cube = np.asarray(observation["environment_state"], np.float64)
        if self.phase == "rise":
            if hand[2] >= self.look_height - self.tolerance:
                if self.cube is None:
                    self.cube = self.locate_cube(observation["pixels"]["front"])
                if self.cube is not None:
                    self.phase = "over"
            return self._move(hand, [*hand[:2], self.look_height], OPEN)
        above = np.array([*self.cube[:2], self.cube[2] + self.approach_height])
        grasp = np.array([*self.cube[:2], self.cube[2] + self.grasp_depth])
        if self.phase == "over":
            if np.linalg.norm(hand[:2] - above[:2]) < self.tolerance:
                self.phase = "descend"
            return self._move(hand, [*above[:2], max(hand[2], above[2])], OPEN)
        if self.phase == "descend":
            if np.linalg.norm(hand - grasp) < self.tolerance:
                self.phase = "close"
            return self._move(hand, grasp, OPEN)
        if self.phase == "close":
            self.closed_for += 1
            if self.closed_for >= self.close_steps:
                self.phase = "lift"
            return self._move(hand, grasp, CLOSE)
        return self._move(hand, [*grasp[:2], self.lift_height], CLOSE)

    def _move(self, hand: np.ndarray, target, gripper: float) -> np.ndarray:
        """The action that moves the hand toward `target` (as far as one step goes) with this gripper action."""
        delta = np.clip((np.asarray(target) - hand) / self.step_size, -1.0, 1.0)
        return np.array([*delta, gripper], np.float32)

    def locate_cube(self, front: np.ndarray) -> np.ndarray | None:
        """The cube's centre from the front camera's frame (H, W, 3), or None when too little of it shows."""
        rgb = np.asarray(front, np.int16)
        red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
        purple = (red - green > 25) & (blue - green > 25)  # the cube's colour: red and blue well above green
        rows, cols = np.nonzero(purple)
        height, width = purple.shape
        if len(rows) < self.min_cube_share * height * width:
            return None
        focal = height / 2 / np.tan(np.radians(self.camera_fovy) / 2)
        # MuJoCo's cameras look along their -z with y up; pixel centres are at +0.5.
        ray = self.camera_rotation @ np.array([(cols.mean() + 0.5 - width / 2) / focal,
                                               -(rows.mean() + 0.5 - height / 2) / focal, -1.0])
        centre_height = self.cube_half_size  # the cube rests on the table
        point = self.camera_position + (centre_height - self.camera_position[2]) / ray[2] * ray
        return np.array([point[0], point[1], centre_height])


def _scene_path() -> Path:
    import gym_hil

    return Path(gym_hil.__file__).parent / "assets" / "scene.xml"


def measure(env_kwargs: dict, episodes: int, seed: int) -> dict:
    """Success rate, steps and (where the expert located the cube itself) localisation errors over `episodes`
    seeded episodes of `ENV_ID` with `env_kwargs`, through robot_rl's adapter."""
    from robot_rl.envs.adapter import AdapterConfig, make_canonical
    from robot_rl.training.experts import run_expert_episode

    env = make_canonical(ENV_ID, env_kwargs, AdapterConfig(gripper_index=3, gripper_open=OPEN, gripper_close=CLOSE),
                         normalize=False)
    expert = PickCubeExpert()
    successes, steps, errors_mm = [], [], []
    started = time.perf_counter()
    try:
        for i in range(episodes):
            episode = run_expert_episode(env, expert, seed + i)
            successes.append(episode.success)
            steps.append(episode.steps)
            if expert.cube is not None and "image_obs" in env_kwargs:
                true_start = _true_cube_start(env_kwargs, seed + i)
                errors_mm.append(float(np.linalg.norm(expert.cube[:2] - true_start[:2]) * 1000))
    finally:
        env.close()
    return {"success_rate": float(np.mean(successes)), "mean_steps": float(np.mean(steps)),
            "errors_mm": errors_mm, "seconds": time.perf_counter() - started}


def _true_cube_start(env_kwargs: dict, seed: int) -> np.ndarray:
    """Where the cube was placed at the reset with `seed` (the environment's own sensor, for the benchmark only)."""
    import gymnasium as gym

    from robot_rl.envs.adapter import import_env_namespace, seeded_reset

    import_env_namespace(ENV_ID)
    env = gym.make(ENV_ID, **{k: v for k, v in env_kwargs.items() if k != "image_obs"})
    try:
        seeded_reset(env, seed)
        return env.unwrapped.data.sensor("block_pos").data.copy()
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="5 episodes each, nothing written")
    args = parser.parse_args()
    episodes = 5 if args.quick else args.episodes
    pixels = measure(PIXEL_KWARGS, episodes, args.seed)
    reference = measure(STATE_KWARGS, episodes, args.seed)
    errors = pixels.pop("errors_mm")
    reference.pop("errors_mm")
    summary = {"success_rate": pixels["success_rate"], "reference_success_rate": reference["success_rate"],
               "cube_error_mm_median": statistics.median(errors) if errors else None,
               "cube_error_mm_max": max(errors) if errors else None, "mean_steps": pixels["mean_steps"],
               "reference_mean_steps": reference["mean_steps"], "episodes": episodes, "seed": args.seed,
               "env_id": ENV_ID, "env_kwargs": PIXEL_KWARGS, "seconds": round(pixels["seconds"], 1),
               "versions": {p: importlib.metadata.version(p) for p in ("gym-hil", "mujoco", "gymnasium")}}
    line = json.dumps(summary)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "gym_hil_expert.json").write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
