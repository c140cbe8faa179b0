"""LeRobot's HIL-SERL actor (`lerobot.rl.actor`'s `actor_cli`, as `python -m lerobot.rl.actor` runs it), started
by benchmarks/peer_lerobot.py with two additions made from outside LeRobot's code:

* the benchmark's environment is registered first (`random_cube_env`), so `--env.task=PandaPickCubeRandomCpu-v0`
  gives LeRobot's `gym.make("gym_hil/...")` the random cube and the CPU-rendered scene;
* a copy of the policy the actor acts with is saved every `--snapshot-every` env steps, with LeRobot's own
  `save_pretrained`, into `--snapshot-dir`/<wall ns>-s<env steps>/ (plus snapshot.json), and once more at the last
  step of the run's budget.

    python snapshotting_actor.py --snapshot-dir DIR --snapshot-every 2000 --budget 30000 [--step-offset S] \
        --config_path CFG ... (LeRobot's own arguments)

Why here and not from the learner's checkpoints: LeRobot's `save_freq` counts optimization steps, whose rate on a
CPU follows the machine's load (one per ~23 s was measured), so no save_freq lands on env steps; and every learner
checkpoint also writes the whole online replay buffer out as a video dataset, which would slow the very run being
timed. The actor counts env steps itself and loads the learner's newest parameters at every episode end
(`update_policy_parameters`): the snapshot is taken right after that load, at the first episode end at or after each
multiple of `--snapshot-every` steps, so it holds the policy the learner had when those steps had been played.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import random_cube_env  # noqa: F401  (registers the benchmark's environment before LeRobot makes it)


class SnapshotTaker:
    """Counts the actor's env steps and saves the policy it acts with (see the module)."""

    def __init__(self, folder: Path, every: int, offset: int, budget: int):
        self.folder, self.every, self.steps, self.budget = folder, every, offset, budget
        self.next_at = (offset // every + 1) * every
        self.policy = None
        self.parameter_loads = 0
        """Episode ends at which the actor's parameters changed: how many of the learner's pushes it acted with."""

    def counting(self, step_env):
        """`step_env_and_process_transition`, counted; the policy acting at the budget's last step is saved."""

        def counted(*args, **kwargs):
            transition = step_env(*args, **kwargs)
            self.steps += 1
            if self.steps == self.budget and self.policy is not None:
                self.save()
            return transition

        return counted

    def saving(self, update_parameters):
        """`update_policy_parameters`, then a snapshot when a multiple of `every` steps has been passed."""
        import torch

        def updated(policy, parameters_queue, device):
            before = policy.actor.mean_layer.weight.detach().clone()
            update_parameters(policy=policy, parameters_queue=parameters_queue, device=device)
            self.parameter_loads += not torch.equal(before, policy.actor.mean_layer.weight)
            self.policy = policy
            if self.steps >= self.next_at:
                self.save()

        return updated

    def save(self) -> None:
        name = f"{time.time_ns()}-s{self.steps:07d}"
        partial = self.folder / f".{name}"  # renamed when complete: the judge never sees half a snapshot
        self.policy.save_pretrained(partial)
        (partial / "snapshot.json").write_text(json.dumps({"env_steps": self.steps,
                                                           "parameter_loads": self.parameter_loads}))
        partial.rename(self.folder / name)
        self.next_at = (self.steps // self.every + 1) * self.every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-dir", type=Path, required=True)
    parser.add_argument("--snapshot-every", type=int, required=True, help="env steps between snapshots")
    parser.add_argument("--budget", type=int, required=True, help="the run's env steps, all actors together")
    parser.add_argument("--step-offset", type=int, default=0, help="env steps earlier actors of this run played")
    ours, lerobot_args = parser.parse_known_args()
    ours.snapshot_dir.mkdir(parents=True, exist_ok=True)
    from lerobot.rl import actor

    taker = SnapshotTaker(ours.snapshot_dir, ours.snapshot_every, ours.step_offset, ours.budget)
    # act_with_policy looks both up in its module at each call: these wrappers see every step and every load.
    actor.step_env_and_process_transition = taker.counting(actor.step_env_and_process_transition)
    actor.update_policy_parameters = taker.saving(actor.update_policy_parameters)
    sys.argv = [sys.argv[0], *lerobot_args]  # LeRobot's parser reads sys.argv
    actor.actor_cli()
    print(f"[snapshotting_actor] env steps {taker.steps}", flush=True)


if __name__ == "__main__":
    main()
