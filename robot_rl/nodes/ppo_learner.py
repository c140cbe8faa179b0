"""PPO learner node: trains the juggling policy in its own vectorized randomized simulation and
publishes it on `rl/policy` (std_msgs/UInt8MultiArray, a codec payload of kind `ppo_policy`:
robot_rl/transport/ppo_policy.py; signed with the run's secret when `run_dir` is set) for the
`juggle_actor`, which flies the ROS quadrotor (simulated or real) with it.

Training runs on a worker thread (the executor stays free for diagnostics). Stopping interrupts
the iteration in progress (tens of seconds on a CPU) at its next network call, so the node exits
within a second or two of SIGINT; it then saves `<run_dir>/ppo_checkpoint.pt` (the weights after
the last optimizer step; `iteration` counts completed iterations) and exports `<run_dir>/policy/`.
A stop while torch.compile compiles the first update (tens of seconds on a loaded CPU, and it
cannot be interrupted) saves nothing: nothing has been trained yet, and the node exits at once.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from std_msgs.msg import UInt8MultiArray

from robot_rl.agents.ppo import PPOConfig
from robot_rl.config_fields import config_from_params, settings_of
from robot_rl.robots.quad.train import JuggleTrainConfig
from robot_rl.ros import qos
from robot_rl.ros.messages import bytes_to_uint8_multiarray
from robot_rl.ros.node_utils import (
    TORCH_THREADS,
    Param,
    ParameterError,
    declare_params,
    params_from_dataclass,
    diagnostics,
    run_node,
    set_torch_threads,
)
from robot_rl.training.ppo_runner import Stopped
from robot_rl.transport.secret import ensure_run_secret

PARAMS = [
    *params_from_dataclass(JuggleTrainConfig, only=("num_envs", "seed", "device", "randomization"),
                           defaults={"randomization": "sim/quad/randomization.yaml"}),
    Param("iterations", 0, "PPO iterations, then stop (0: until the graph stops).", 0, 10_000_000),
    Param("publish_every", 10, "Publish the policy every this many iterations.", 1, 100_000),
    *params_from_dataclass(PPOConfig, defaults={name: getattr(JuggleTrainConfig().ppo, name)
                                                for name in settings_of(PPOConfig)}),
    Param("run_dir", "", "Checkpoint, exported policy, TensorBoard and the secret that signs policies ('' for none)."),
    TORCH_THREADS,
]


STOP_WAIT_S = 5.0
"""How long a stop waits for the iteration in progress to reach its next network call."""


class PPOLearnerNode(Node):
    def __init__(self):
        super().__init__("ppo_learner")
        p = self.params = declare_params(self, PARAMS)
        set_torch_threads(p["torch_threads"])
        from robot_rl.device import resolve_device
        from robot_rl.robots.quad.vec_env import QuadJuggleVecEnv
        from robot_rl.resources import package_path
        from robot_rl.training.ppo_runner import OnPolicyRunner

        try:
            self.device = resolve_device(p["device"])
            self.env = QuadJuggleVecEnv(p["num_envs"], device=self.device,
                                        randomization=package_path(p["randomization"]), seed=p["seed"])
        except (FileNotFoundError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
        try:
            self.ppo_config = config_from_params(PPOConfig, p)
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        if self.ppo_config.history_steps > 1:
            from robot_rl.agents.memory import HistoryVecEnv

            self.env = HistoryVecEnv(self.env, self.ppo_config.history_steps)
        run_dir = Path(p["run_dir"]) if p["run_dir"] else None
        self.run_dir = run_dir
        self.key = ensure_run_secret(run_dir) if run_dir else None
        self._stop = threading.Event()
        self.runner = OnPolicyRunner(self.env, self.ppo_config, str(run_dir / "tensorboard") if run_dir else None,
                                     self.device, seed=p["seed"], stop=self._stop)
        self.policy_pub = self.create_publisher(UInt8MultiArray, "rl/policy", qos.POLICY)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.last_stats: dict[str, float] = {}
        self.published = 0
        self._thread = threading.Thread(target=self._train, name="ppo-train", daemon=True)
        self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics)

    def _train(self) -> None:
        try:
            while not self._stop.is_set() and (not self.params["iterations"]
                                               or self.runner.iteration < self.params["iterations"]):
                self.last_stats = self.runner.learn(1)[0]
                self._publish_policy()
        except Stopped:
            pass

    def _publish_policy(self) -> None:
        from robot_rl.transport.ppo_policy import encode_ppo_policy

        if self.runner.iteration % self.params["publish_every"] == 0:
            card = {"task": "quad_juggle", "iteration": self.runner.iteration,
                    "env_steps": self.runner.total_env_steps, "published_at": time.time()}
            payload = encode_ppo_policy(self.runner.alg.actor_critic, card, key=self.key)
            self.policy_pub.publish(bytes_to_uint8_multiarray(payload))
            self.published += 1

    def _publish_diagnostics(self) -> None:
        s = self.last_stats
        self.diag_pub.publish(diagnostics(self, {
            "iteration": self.runner.iteration, "env_steps": self.runner.total_env_steps,
            "policies_published": self.published, "steps_per_s": round(s.get("steps_per_s", 0.0), 1),
            "episode_hits": round(s.get("Episode/hits", 0.0), 2), "mean_return": round(s.get("mean_return", 0.0), 2),
            "device": str(self.device)}))

    def close(self) -> None:
        """Stops training at its next network call and saves. A first update still compiling after STOP_WAIT_S is
        left to the process's exit: the supervisor's 20 s before SIGKILL did not cover a compilation on a loaded
        CPU, and saving beside the update could save weights it is writing."""
        from robot_rl.agents.ppo import export_policy

        self._stop.set()
        self._thread.join(timeout=STOP_WAIT_S)
        if self._thread.is_alive() and self.runner.iteration == 0:
            # The context is down by now (Ctrl-C): the node's logger could not publish this.
            print("[robot_rl] stopped while torch.compile compiled the first update: nothing trained to save",
                  file=sys.stderr, flush=True)
        elif self.run_dir is not None:
            self._thread.join()  # a later update compiling again: what it trained is saved once it stops
            self.runner.save(str(self.run_dir / "ppo_checkpoint.pt"))
            export_policy(self.runner.alg.actor_critic, self.run_dir / "policy",
                          {"task": "quad_juggle", "iteration": self.runner.iteration,
                           "env_steps": self.runner.total_env_steps,
                           "ppo": dataclasses.asdict(self.ppo_config)})
        self.env.close()


def main(args=None) -> NoReturn:
    run_node(PPOLearnerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
