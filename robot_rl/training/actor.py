"""The actor's logic without ROS: episodes, transitions, batching, policy swaps, evaluation.

The node feeds it one synchronized robot state per control step and executes the action it
returns; everything else (what a transition is, when an episode ends, what goes to the
learner and when) is decided here, so it is testable with a plain gymnasium env.

Recording sessions (`robot-rl record`, `record_only`) use the same loop: a person drives, the
robot holds still while nobody does, nothing goes to a learner, and every finished episode goes
to an `EpisodeWriter`. A finished episode is held for review and committed when the next one runs
(or the session ends), so a person can still throw it away with "rerecord" during the reset; the
session finishes when its last episode is committed, so the last one is reviewed like the others.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.agents.policy import Policy
from robot_rl.config_fields import setting
from robot_rl.data.episodes import EpisodeWriter
from robot_rl.tasks import ActionHistory, State, TaskSpec, task_observation
from robot_rl.training.actor_episodes import EpisodeStats, StepResult
from robot_rl.training.actor_progress import PROGRESS_COUNTERS, committed_progress
from robot_rl.training.batch_packer import BatchPacker, PendingTransitions, TakenBatch, pack_batch
from robot_rl.training.policy_payload import PreparedPolicy, policy_from_payload
from robot_rl.transport import codec
from robot_rl.transport.kinds import ACK, POLICY
from robot_rl.transport.outbox import Outbox

LABELS = ("success", "failure", "reset", "rerecord")
"""Episode labels a person can give through teleop/event (see ActorCore.label)."""

@dataclass
class ActorConfig:
    """Actor settings; the `setting` fields are the actor nodes' parameters of the same name."""

    actor_id: str = setting("actor0", "Unique id of this actor among those feeding one learner.")
    """Part of every payload's identity."""
    batch_transitions: int = setting(50, "Transitions per payload to the learner.", low=1, high=100_000)
    """An episode end also flushes."""
    total_steps: int = setting(10_000, "Training steps before evaluation (0: train forever).", low=0,
                               high=1_000_000_000)
    random_steps: int = setting(0, "Uniform random actions before using the policy.", low=0, high=100_000_000)
    """Exploration before the first policy."""
    eval_episodes: int = setting(50, "Deterministic evaluation episodes after training.", low=0, high=100_000)
    sync_updates_per_step: float = setting(0.0, "Simulation: wait for this many learner updates per step (0: run "
                                           "free).", low=0.0, high=1000.0)
    """Before each training step, wait until the learner has made this many updates per step taken
    (beyond sync_slack_steps), so the update-to-data ratio does not depend on how fast this machine
    is. A real robot must run free."""
    sync_slack_steps: int = setting(500, "Steps the actor may run ahead of the learner when synchronized.", low=0,
                                    high=10_000_000)
    """Ahead of the learner's update count."""
    record_only: bool = False
    """Recording session: the person's actions only (the robot holds still without one), no
    learner, no evaluation; episodes go to the recorder."""
    record_episodes: int = setting(0, "Record mode: finish after this many kept episodes (0: until stopped).", low=0,
                                   high=1_000_000)
    episode_time_s: float = setting(0.0, "Episode length in seconds at the task's control rate (0: the task's "
                                    "horizon; `record` sets 30 s).", low=0.0, high=3600.0)
    """A person at a keyboard or SpaceMouse needs tens of seconds where a policy's horizon is a few
    (LeRobot's recorder: episode_time_s; HIL-SERL's demonstrations: 100-200 steps): `record` and
    `train --teleop --episode-time-s` set it."""
    keep_idle: bool = setting(False, "Record mode: keep episodes nobody drove (else discarded and counted).")
    """An episode in which no person's action reached the robot is the robot holding still: as a
    demonstration it would teach standing still, so it is discarded unless asked for."""
    seed: int = setting(0, "Random seed.", low=0, high=2**31 - 1)
    learned_reward: bool = False
    """Training rewards and episode ends come from the reward node (`on_learned_reward`,
    `on_learned_done`, keyed by the stamp of the observation they score) instead of the task;
    evaluation still uses the task's own success."""
    sync_rewards: bool = setting(False, "reward_node in simulation: wait for each step's reward before the next "
                                 "step (the lockstep simulator then runs at the reward node's pace). Leave off on a "
                                 "robot.")
    """No step goes unscored (the reward node scores only the newest frame when it falls behind); a
    reward missing for longer than reward_wait_s is given up on (sent late)."""
    reward_wait_s: float = setting(1.0, "reward_node: how long a batch waits for missing rewards before it goes to "
                                   "the learner with them flagged late (the learner fills them in).", low=0.0,
                                   high=60.0)


class ActorCore:
    """`progress_path`: a JSON file of the PROGRESS_COUNTERS, rewritten atomically each time a batch
    goes into the outbox and read back at start (with the batch's own copy: actor_progress.py), so a
    restarted actor (crash, SIGKILL, `--resume`) continues its step and episode counters where its last
    batch left them: the steps of a batch not yet made are taken again, and no episode index is used
    twice. Evaluation, when the steps are done, starts again from its first episode."""

    def __init__(self, task: TaskSpec, config: ActorConfig, outbox: Outbox, recorder: EpisodeWriter | None = None,
                 progress_path: str | os.PathLike | None = None, key: bytes | None = None,
                 pack_in_background: bool = False):
        """`key`: the run's secret (robot_rl/ros/security.py) that signs the transition payloads.
        `pack_in_background`: batches are taken in the step (cheap) and packed into the outbox on a thread of
        their own (`packer`, batch_packer.py) from the owner's next `flush_if_due`, which a node calls once its
        command is out (a packing thread started inside the step slowed that step's command); else `flush` packs
        them at once."""
        if config.record_only and recorder is None:
            raise ValueError("record_only needs a recorder (an EpisodeWriter)")
        self.task, self.config, self.outbox, self.recorder = task, config, outbox, recorder
        self.key = key
        self.rng = np.random.default_rng(config.seed)
        self.policy: Policy | None = None
        self.policy_version = self.learner_updates = 0
        self.last_reward, self.last_success = math.nan, False
        """The reward and the task's success estimate of the newest step (what a person is shown)."""
        self.last_recorded: tuple[float, bool, bool, bool | None] | None = None
        """(reward, terminated, truncated, success_label) of the newest transition recorded (the step log's)."""
        self.train_steps = 0
        self.episode_index = 0
        self.evaluating = False
        self.pinned = False
        """Evaluation only (`pin_policy`): one policy acts in every episode, no other is taken."""
        self.finished = False
        self.eval_results: list[EpisodeStats] = []
        self.history: list[EpisodeStats] = []
        self.transitions_sent = self.payloads_sent = self.acked = 0
        self._episode: EpisodeStats | None = None
        self._prev: tuple[np.ndarray, np.ndarray, bool] | None = None  # obs, action, intervention
        self.actions = ActionHistory.of(task)
        """The actions sent last, which the task may observe (`TaskSpec.action_history`)."""
        self._label: str | None = None
        self._held_episode: tuple[Any, EpisodeStats] | None = None  # a recorded episode awaiting its commit
        self.episodes_recorded = self.episodes_discarded = 0
        self.kept_takeovers = self.kept_person_steps = 0
        """Recording: the person's takeovers and the steps they drove in the episodes kept."""
        self.episodes_idle = 0
        """Record mode: episodes discarded because nobody drove them (also in episodes_discarded)."""
        self.last_discard: tuple[int, str] | None = None
        """(episode index, why) of the last episode a recording session threw away."""
        self.label_disagreement: tuple[int, str] | None = None
        """(episode index, label) of the last person's label the task's success check contradicted."""
        self._pending = PendingTransitions()
        # Learned rewards: stamp -> row in _pending of every pending transition (by the stamp of
        # the observation it reached), the rows still waiting for their reward (stamp -> since when).
        self._stamp_rows: dict[int, int] = {}
        self._awaiting_reward: dict[int, float] = {}
        self._episode_first_stamp: int | None = None
        self._learned_done = False
        self._flush_due = False
        self.packer: BatchPacker[TakenBatch] | None = BatchPacker(self._pack) if pack_in_background else None
        self._taken: list[TakenBatch] = []
        """Batches taken for the packer, handed to it by the next flush_if_due."""
        self.learned_rewards_received = self.late_rewards_sent = 0
        self.progress_path = Path(progress_path) if progress_path is not None else None
        if self.progress_path is not None:
            self._restore_progress()

    def _restore_progress(self) -> None:
        saved = committed_progress(self.progress_path, self.outbox, self.key)
        if saved is not None:
            for name, value in saved.items():
                setattr(self, name, value)
            self.evaluating = bool(self.config.total_steps) and self.train_steps >= self.config.total_steps

    def _progress(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in PROGRESS_COUNTERS}

    # ---- policy -------------------------------------------------------------------------------

    def load_policy(self, payload: codec.Payload) -> bool:
        """Swaps in newer weights; returns False for an old version, and once the first evaluation
        episode has begun: evaluation keeps the policy it started with (the version eval.json
        names is the one evaluated). Raises ValueError if malformed."""
        prepared = self.prepare_policy(payload)
        return prepared is not None and self.adopt_policy(prepared)

    def prepare_policy(self, payload: codec.Payload) -> PreparedPolicy | None:
        """The weights of `payload` in a policy of their own, built without touching the acting one,
        so that a node builds it on another thread while the robot keeps acting; None for a version
        this actor would not take. Raises ValueError if malformed."""
        if payload.kind != POLICY:
            raise ValueError(f"expected a {POLICY!r} payload, got {payload.kind!r}")
        version = payload.meta.get("version")
        if not isinstance(version, int):
            raise ValueError("policy payload without an integer version")
        if not self._takes_version(version):
            return None
        policy = policy_from_payload(payload, self.task)
        return PreparedPolicy(policy, version, int(payload.meta.get("num_updates", self.learner_updates)))

    def pin_policy(self, payload: codec.Payload) -> None:
        """Evaluation only: `payload`'s policy acts in all `eval_episodes` episodes, deterministically, with no
        training step before them and no learner's policy taken instead. Raises ValueError if malformed."""
        if self.config.record_only:
            raise ValueError("a recording session has no policy to evaluate")
        if self.config.eval_episodes == 0:
            raise ValueError("nothing to evaluate it on: eval_episodes is 0")
        prepared = self.prepare_policy(payload)
        if prepared is None:
            raise ValueError(f"policy version {payload.meta.get('version')} is not one this actor takes")
        self.adopt_policy(prepared)
        self.pinned = self.evaluating = True

    def adopt_policy(self, prepared: PreparedPolicy) -> bool:
        """Makes a prepared policy the acting one, unless a newer one or an evaluation came first."""
        if not self._takes_version(prepared.version):
            return False
        self.policy, self.policy_version, self.learner_updates = prepared
        return True

    def _takes_version(self, version: int) -> bool:
        return version > self.policy_version and not self.pinned and not (self.evaluation_started
                                                                          and self.policy is not None)

    def waiting_for_rewards(self) -> bool:
        """True while a training step must wait for learned rewards (see sync_rewards)."""
        if not (self.config.sync_rewards and not self.evaluating and self._awaiting_reward):
            return False
        # Never forever: a frame the reward node did not score (e.g. taken as the next episode's
        # first frame) goes late after reward_wait_s, as without synchronisation.
        return time.monotonic() - min(self._awaiting_reward.values()) < self.config.reward_wait_s

    def waiting_for_learner(self) -> bool:
        """True while a training step must wait for the learner (see sync_updates_per_step). A
        waiting actor holds nothing back: its part batch goes now, as the learner may need it to
        finish its warm-up or to be allowed its next updates (max_update_ratio)."""
        ratio = self.config.sync_updates_per_step
        if ratio <= 0 or self.evaluating:
            return False
        waiting = (self.train_steps - self.config.sync_slack_steps) * ratio > self.learner_updates
        if waiting:
            self.flush()  # a no-op when nothing is pending
        return waiting

    # ---- episodes -----------------------------------------------------------------------------

    def start_episode(self, commit_recording: bool = True) -> None:
        """Begins an episode; a recording's finished episode is written first unless the caller
        writes it itself (`commit_recording`) before the new episode's first step is staged."""
        if commit_recording:
            self.commit_recording()
        if self.finished:
            raise RuntimeError("actor finished: training and evaluation (or the recording) are done")
        self._prev, self._label = None, None
        self.actions.reset()
        self.last_reward, self.last_success = math.nan, False  # nothing of the last episode is shown as this one's
        self._episode_first_stamp, self._learned_done = None, False
        self._episode = EpisodeStats(self.episode_index, evaluation=self.evaluating,
                                     policy_version=self.policy_version)
        self.episode_index += 1

    @property
    def evaluation_started(self) -> bool:
        return bool(self.eval_results) or (self._episode is not None and self._episode.evaluation)

    @property
    def in_episode(self) -> bool:
        return self._episode is not None

    @property
    def max_episode_steps(self) -> int:
        """The episode's horizon: the task's, or episode_time_s at the task's rate."""
        if self.config.episode_time_s > 0:
            return max(1, round(self.config.episode_time_s * self.task.control_hz))
        return self.task.max_episode_steps

    def label(self, event: str) -> None:
        """A person's episode label (teleop/event), applied at the next step:

        - "success": the episode ends as a success; on a task whose success ends the episode
          (sparse reward) that transition gets the success reward 1 and is terminal, as HIL-SERL's
          success key does; otherwise the episode is truncated there.
        - "failure": the episode ends (truncated: a failure is not a terminal state), unsuccessful.
        - "reset": the episode ends (truncated) without a label.
        - "rerecord": with a recorder the episode is thrown away (the one in progress, or the one
          just finished and not yet committed); without one, as reset.
        """
        if event not in LABELS:
            raise ValueError(f"unknown episode label {event!r}; expected one of {LABELS}")
        if event == "rerecord" and self._held_episode is not None:
            self.recorder.discard_episode()
            self.last_discard = (self._held_episode[1].index, "re-recorded")
            self._held_episode = None
            self.episodes_discarded += 1
        elif self._episode is not None:
            self._label = event

    @property
    def reviewing(self) -> str:
        """What a recorded episode held for review (r throws it away) is: "last" when its commit finishes
        the session, "episode" for another, "" when none is held."""
        if self._held_episode is None:
            return ""
        target = self.config.record_episodes
        return "last" if target and self.episodes_recorded + 1 >= target else "episode"

    def commit_recording(self) -> None:
        """Writes the finished episode held for review (recording sessions; else nothing); the
        session is finished once it holds the episodes asked for."""
        if self._held_episode is None:
            return
        final_obs, episode = self._held_episode
        self.recorder.end_episode(final_obs, success_check=episode.success_check)
        self._held_episode = None
        self.episodes_recorded += 1
        self.kept_takeovers += episode.interventions
        self.kept_person_steps += episode.intervention_steps
        target = self.config.record_episodes
        self.finished = self.finished or (bool(target) and self.episodes_recorded >= target)

    def step(self, state: State, human_action: np.ndarray | None = None, stamp_ns: int | None = None) -> StepResult:
        """Consumes the state reached after the previous action; returns the next action.

        human_action: the teleoperator's action when a person has taken over; it is executed
        instead of the policy's and the transition is flagged as an intervention.
        stamp_ns: the observation's stamp (needed with learned rewards, which are keyed by it).
        """
        if self._episode is None:
            raise RuntimeError("step() outside an episode: call start_episode() after the reset")
        episode = self._episode
        obs = task_observation(self.task, self.actions.joined(state))
        learned = self.config.learned_reward and not episode.evaluation
        if learned and stamp_ns is None:
            raise ValueError("learned rewards are keyed by the observation's stamp: pass stamp_ns")
        if self._episode_first_stamp is None:
            self._episode_first_stamp = stamp_ns
        if self._prev is not None:
            success = episode.success_check = bool(self.task.success(state))
            if learned and self._learned_done:
                # The reward node declared the previous observation done (its transition is terminal).
                episode.success = success
                return StepResult(None, self._end_episode(obs))
            # With learned rewards the reward node's value fills the row in later (on_learned_reward).
            reward = 0.0 if learned else float(self.task.reward(state))
            label, self._label = self._label, None
            if label == "rerecord" and self.recorder is not None:
                return StepResult(None, self._end_episode(obs, discard=True))
            if label is not None:
                if label in ("success", "failure") and (label == "success") != success:
                    self.label_disagreement = (episode.index, label)
                success = label == "success" or (success and label in ("reset", "rerecord"))
                if label == "success" and self.task.terminate_on_success and not learned:
                    reward = 1.0
            terminated = (label == "success") if learned else success and self.task.terminate_on_success
            if self.task.terminated is not None and not learned:
                terminated = terminated or self.task.terminated(state)
            if self.task.failure is not None and self.task.failure(state):
                terminated, success = True, False
            episode.steps += 1
            episode.ret += reward
            self.last_reward, self.last_success = reward, success
            # The training budget's last step truncates the episode in progress (the car's run for
            # thousands of steps): `total_steps` is the number of transitions sent, exactly.
            budget_spent = (not episode.evaluation and bool(self.config.total_steps)
                            and self.train_steps + 1 >= self.config.total_steps)
            truncated = not terminated and (episode.steps >= self.max_episode_steps or label is not None
                                            or budget_spent or (self.task.truncated is not None
                                                                and self.task.truncated(state)))
            if not episode.evaluation:
                # A person's label, or the task's own success where it ends the episode (the sim knows).
                success_label = {"success": True, "failure": False}.get(label, True if terminated else None)
                # Counted before it is recorded: a full batch flushes (and saves the progress a restart
                # resumes from) inside _record, and the step counter must include the step it sent.
                self.train_steps += 1
                self._record(self._prev, reward, obs, terminated, truncated, success_label,
                             stamp_ns if learned else None)
            if terminated or truncated:
                episode.success = success
                return StepResult(None, self._end_episode(obs))
        action, intervention = self._choose_action(obs, human_action, episode.evaluation)
        taking_over = intervention and not (self._prev is not None and self._prev[2])
        episode.interventions += int(taking_over)
        episode.intervention_steps += int(intervention)
        self._prev = (obs, action, intervention)
        self.actions.push(action)
        return StepResult(action)

    def _choose_action(self, obs, human_action: np.ndarray | None,
                       evaluation: bool) -> tuple[np.ndarray, bool]:
        action, intervention = self._unlimited_action(obs, human_action, evaluation)
        limit = self.task.action_rate_limit
        if limit is not None:  # what the robot executes, and so what the transition records
            previous = self._prev[1] if self._prev is not None else np.zeros_like(action)
            action = np.clip(action, previous - limit, previous + limit).astype(np.float32)
        return action, intervention

    def _unlimited_action(self, obs, human_action: np.ndarray | None,
                          evaluation: bool) -> tuple[np.ndarray, bool]:
        if human_action is not None:
            action = np.asarray(human_action, dtype=np.float32)
            if action.shape != (self.task.action_dim,) or not np.isfinite(action).all():
                raise ValueError(f"human action has shape {action.shape} or non-finite values")
            return np.clip(action, -1.0, 1.0), True
        if self.config.record_only:
            return self._hold_action(), False
        if self.policy is None or (not evaluation and self.train_steps < self.config.random_steps):
            return self.rng.uniform(-1.0, 1.0, self.task.action_dim).astype(np.float32), False
        action = self.policy.act(obs, deterministic=evaluation)
        if not np.isfinite(action).all():  # never send a NaN to a robot
            raise ValueError("policy produced a non-finite action")
        return np.clip(action, -1.0, 1.0).astype(np.float32), False

    def _hold_action(self) -> np.ndarray:
        """Nobody drives a recording session: no motion, the gripper (the last entry) as it was."""
        action = np.zeros(self.task.action_dim, np.float32)
        action[-1] = self._prev[1][-1] if self._prev is not None else -1.0
        return action

    def _record(self, prev, reward, next_obs, terminated, truncated, success_label: bool | None,
                stamp_ns: int | None = None) -> None:
        obs, action, intervention = prev
        self.last_recorded = (reward, terminated, truncated, success_label)
        if self.recorder is not None:
            self.recorder.add_step(obs if isinstance(obs, dict) else {"state": obs}, action, reward, terminated,
                                   truncated, intervention, success_label, time.time())
        if self.config.record_only:
            return
        f = self._pending.fields
        values = {"action": action, "reward": reward, "terminated": terminated, "truncated": truncated,
                  "intervention": intervention}
        if self.task.cameras:
            values.update(obs=obs["state"], next_obs=next_obs["state"])
            for camera in self.task.cameras:
                values[f"obs_{camera}"], values[f"next_obs_{camera}"] = obs[camera], next_obs[camera]
        else:
            values.update(obs=obs, next_obs=next_obs)
        for name, value in values.items():
            f.setdefault(name, []).append(value)
        if stamp_ns is not None:
            self._stamp_rows[stamp_ns] = len(f["reward"]) - 1
            self._awaiting_reward[stamp_ns] = time.monotonic()
        if len(f["reward"]) >= self.config.batch_transitions:
            self.flush()

    # ---- learned rewards (the reward node) ------------------------------------------------------

    def on_learned_reward(self, stamp_ns: int, reward: float) -> bool:
        """The reward node's reward for the observation stamped `stamp_ns`: fills in the pending
        transition that reached it. Returns False if no pending transition waits for it (already
        sent flagged late, which the learner fills in, or not ours).

        Raises:
            ValueError: the reward is not finite.
        """
        if not np.isfinite(reward):
            raise ValueError(f"learned reward must be finite, got {reward}")
        if self._awaiting_reward.pop(stamp_ns, None) is None:
            return False
        self._pending.fields["reward"][self._stamp_rows[stamp_ns]] = float(reward)
        self.learned_rewards_received += 1
        if self._episode is not None:
            self._episode.ret += float(reward)
        if self._flush_due and not self._awaiting_reward:
            self.flush()
        return True

    def on_learned_done(self, stamp_ns: int) -> None:
        """The reward node declared the observation stamped `stamp_ns` done: the transition that reached
        it becomes terminal and, if it belongs to the episode in progress, the episode ends at the next
        step (the transition from the done observation on is not recorded)."""
        row = self._stamp_rows.get(stamp_ns)
        if row is not None:
            f = self._pending.fields
            f["terminated"][row], f["truncated"][row] = True, False
        first = self._episode_first_stamp
        if self._episode is not None and first is not None and stamp_ns >= first:
            self._learned_done = True

    def flush_if_due(self) -> None:
        """Sends a batch held for missing rewards once they are in or `reward_wait_s` passed; hands the batches
        taken since the last call to the packer."""
        if self._flush_due:
            self.flush()
        for batch in self._taken:
            self.packer.submit(batch)
        self._taken.clear()

    def _end_episode(self, final_obs, discard: bool = False) -> EpisodeStats:
        episode, self._episode, self._prev = self._episode, None, None
        self.history.append(episode)
        if self.recorder is not None and not episode.evaluation:
            idle = self.config.record_only and not self.config.keep_idle and episode.intervention_steps == 0
            if discard or (idle and self.recorder.steps_in_episode):
                self.recorder.discard_episode()
                self.episodes_discarded += 1
                self.episodes_idle += int(not discard)
                self.last_discard = (episode.index, "re-recorded" if discard else
                                     f"nobody drove it ({episode.steps} steps without a person's input; "
                                     "record --keep-idle keeps such episodes)")
            elif self.recorder.steps_in_episode:
                self._held_episode = (final_obs if isinstance(final_obs, dict) else {"state": final_obs}, episode)
        if self.config.record_only:
            return episode
        if episode.evaluation:
            self.eval_results.append(episode)
            if len(self.eval_results) >= self.config.eval_episodes:
                self.finished = True
        else:
            self._pending.episodes.append(episode.as_dict())
            if self.config.total_steps and self.train_steps >= self.config.total_steps:
                self.evaluating = True
                self.finished = self.config.eval_episodes == 0
        self.flush()
        return episode

    # ---- transport ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Puts pending transitions into the outbox as one payload (with learned rewards, after their rewards are
        in or the oldest missing one waited `reward_wait_s`: those go flagged late); with a `packer`, on its
        thread."""
        f = self._pending.fields
        n = len(f["reward"])
        if n == 0 and not self._pending.episodes:
            return
        if self._awaiting_reward and time.monotonic() - min(self._awaiting_reward.values()) < self.config.reward_wait_s:
            self._flush_due = True
            return
        stamps = late = None
        if self._stamp_rows:
            stamps = np.zeros(n, np.int64)
            for stamp, row in self._stamp_rows.items():
                stamps[row] = stamp
            late = np.array([s in self._awaiting_reward for s in stamps], bool)
            self.late_rewards_sent += int(late.sum())
        self._stamp_rows, self._awaiting_reward, self._flush_due = {}, {}, False
        progress = self._progress() | {"transitions_sent": self.transitions_sent + n,
                                        "payloads_sent": self.payloads_sent + 1}
        batch = TakenBatch(self._pending, stamps, late, {
            "actor_id": self.config.actor_id, "seq": self.outbox.allocate_seq(), "task": self.task.name,
            "policy_version": self.policy_version, "episodes": self._pending.episodes, "sent_at": time.time(),
            "progress": progress})
        self.transitions_sent, self.payloads_sent = progress["transitions_sent"], progress["payloads_sent"]
        self._pending = PendingTransitions()
        if self.packer is None:
            self._pack(batch)
        else:
            self._taken.append(batch)

    def _pack(self, batch: TakenBatch) -> None:
        pack_batch(batch, self.task, self.outbox, self.key, self.progress_path)

    @property
    def unacknowledged(self) -> int:
        """Batches taken that the learner has not acknowledged: in the outbox or still to be packed."""
        return len(self.outbox) + len(self._taken) + (self.packer.in_flight if self.packer is not None else 0)

    def close(self) -> bool:
        """Packs the batches still to be packed (they are then on disk, in the outbox); True if all were."""
        if self.packer is None:
            return True
        self.flush_if_due()
        return self.packer.close()

    def handle_ack(self, payload: codec.Payload) -> int:
        """Drops acknowledged payloads from the outbox; returns how many were ours and new."""
        if payload.kind != ACK or payload.meta.get("actor_id") != self.config.actor_id:
            return 0
        acked = sum(self.outbox.ack(int(s)) for s in payload.arrays.get("seqs", ()))
        self.acked += acked
        return acked

    # ---- reporting ----------------------------------------------------------------------------

    def success_rate(self, last: int = 20, evaluation: bool = False) -> float:
        episodes = [e for e in self.history if e.evaluation == evaluation][-last:]
        return float(np.mean([e.success for e in episodes])) if episodes else 0.0

    @property
    def episode_steps(self) -> int:
        """Steps of the episode in progress (0 between episodes)."""
        return self._episode.steps if self._episode is not None else 0

    def record_summary(self) -> dict[str, Any]:
        return {"dataset": str(self.recorder.path) if self.recorder is not None else None,
                "episodes_recorded": self.episodes_recorded, "episodes_discarded": self.episodes_discarded,
                "episodes_discarded_idle": self.episodes_idle,
                "steps": self.recorder.num_steps if self.recorder is not None else 0,
                "person_steps": self.kept_person_steps, "takeovers": self.kept_takeovers}

    def intervention_rate(self, last: int = 20) -> float:
        """Share of the last training episodes in which a person took over."""
        episodes = [e for e in self.history if not e.evaluation][-last:]
        return float(np.mean([e.interventions > 0 for e in episodes])) if episodes else 0.0

    def eval_summary(self) -> dict[str, Any]:
        """The evaluation's figures, each episode's as `robot-rl eval` lists them."""
        successes = [e.success for e in self.eval_results]
        return {"episodes": len(successes), "success_rate": float(np.mean(successes)) if successes else 0.0,
                "mean_return": float(np.mean([e.ret for e in self.eval_results])) if successes else 0.0,
                "train_steps": self.train_steps, "policy_version": self.policy_version,
                "results": [{"success": e.success, "return": round(e.ret, 4), "steps": e.steps}
                            for e in self.eval_results]}
