"""Judges LeRobot's policy snapshots for benchmarks/peer_lerobot.py, inside LeRobot's own venv.

Run with `.venv-peer-lerobot/bin/python` and PYTHONPATH holding the repository root, `benchmarks/` and this folder:

    python snapshot_judge.py --config_path CFG --env.task TASK

It reads one JSON request per line on stdin, `{"snapshot": DIR, "episodes": N, "seed": S, "max_failures": K}`, and
answers each with one JSON line on stdout, the same fields robot_rl's evaluator gives for our snapshots.

What judges: robot_rl's `evaluate_policy`, the function that judges our snapshots too (the same episode seeds from
`seed`, NumPy's global state seeded per episode, which places gym-hil's cube; success = the environment's own flag
at any step; the same early stop). What acts: the snapshot loaded by LeRobot's own `SACPolicy.from_pretrained`,
fed observations through LeRobot's own gym_hil environment and processors (`make_robot_env`, `make_processors`,
`step_env_and_process_transition`), exactly as its actor feeds them. Deterministic actions, as for ours: the
mode of LeRobot's tanh-Gaussian actor (tanh of its mean) and its discrete critic's best gripper action
(`SACPolicy.select_action` samples the Gaussian instead).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

import random_cube_env  # noqa: F401  (registers the benchmark's environment before LeRobot makes it)


class ProcessedEnv:
    """LeRobot's gym_hil environment behind its processors, with Gymnasium's reset/step: observations are what
    LeRobot's policy reads, actions what it emits; info["is_success"] is the environment's own success flag."""

    def __init__(self, env_config):
        from lerobot.rl.gym_manipulator import make_processors, make_robot_env

        self.env, teleop = make_robot_env(env_config)
        self.env_processor, self.action_processor = make_processors(self.env, teleop, env_config, "cpu")
        self.transition = None

    def reset(self, seed: int | None = None, options=None):
        from lerobot.processor.converters import create_transition
        from lerobot.processor import TransitionKey

        observation, info = self.env.reset(seed=seed, options=options)
        self.env_processor.reset()
        self.action_processor.reset()
        self.transition = self.env_processor(create_transition(observation=observation, info=info))
        return self.transition[TransitionKey.OBSERVATION], self._info(info)

    def step(self, action):
        from lerobot.processor import TransitionKey
        from lerobot.rl.gym_manipulator import step_env_and_process_transition

        self.transition = step_env_and_process_transition(self.env, self.transition, action, self.env_processor,
                                                          self.action_processor)
        t = self.transition
        return (t[TransitionKey.OBSERVATION], float(t[TransitionKey.REWARD]), bool(t[TransitionKey.DONE]),
                bool(t[TransitionKey.TRUNCATED]), self._info(t[TransitionKey.INFO]))

    @staticmethod
    def _info(info: dict) -> dict:
        from robot_rl.envs.adapter import SUCCESS_KEYS

        return {**info, "is_success": any(bool(info.get(key, False)) for key in SUCCESS_KEYS)}

    def close(self) -> None:
        self.env.close()


def deterministic_actor(policy):
    """act(observation, info) -> LeRobot's action tensor: the actor's mode, then the discrete gripper's argmax."""

    @torch.no_grad()
    def act(observation, info):
        batch = {key: value for key, value in observation.items() if key in policy.config.input_features}
        features = None
        if policy.shared_encoder and policy.actor.encoder.has_images:
            features = policy.actor.encoder.get_cached_image_features(batch)
        _, _, means = policy.actor(batch, features)
        action = torch.tanh(means)
        if policy.config.num_discrete_actions is not None:
            gripper = policy.discrete_critic(batch, features).argmax(dim=-1, keepdim=True)
            action = torch.cat([action, gripper.to(action.dtype)], dim=-1)
        return action

    return act


def judge(request: dict, env_config) -> dict:
    from lerobot.policies.sac.modeling_sac import SACPolicy

    from robot_rl.training.evaluate import evaluate_policy

    snapshot = Path(request["snapshot"])
    policy = SACPolicy.from_pretrained(str(snapshot)).eval()
    meta = json.loads((snapshot / "snapshot.json").read_text())
    result = evaluate_policy(deterministic_actor(policy), ProcessedEnv(env_config), request["episodes"],
                             request["seed"], request.get("max_failures"))
    return {"policy": str(snapshot), "policy_version": meta["parameter_loads"], "transitions": meta["env_steps"],
            "episodes": request["episodes"], **result}


def main() -> None:
    from lerobot.configs.train import TrainRLServerPipelineConfig
    from lerobot.policies import factory  # noqa: F401  (registers the policy types the config names)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_path", required=True)
    parser.add_argument("--env.task", dest="task", required=True)
    args = parser.parse_args()
    # Answers go out on a copy of stdout; whatever LeRobot, MuJoCo or torch print lands in stderr (the judge's log).
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    config = TrainRLServerPipelineConfig.from_pretrained(args.config_path, cli_args=[f"--env.task={args.task}"])
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(judge(json.loads(line), config.env)), file=answers, flush=True)


if __name__ == "__main__":
    main()
