"""A person recording demonstrations in any Gymnasium environment, without ROS (`robot-rl record --env`).

The environment runs on the wall clock at `control_hz`; the person drives through `LocalTeleop`
with the keys and timing of the graph's recording sessions: after each reset the scene holds for
`reset_time_s` while the console counts down, then the episode runs for at most `episode_time_s`
of the person's time. While nobody drives, the robot holds (the motion axes at zero, the gripper
as it was). Keys: success / failure label the episode and end it, reset (h) ends it without a
label, re-record (r) drops it and records it again, pause (p) holds the robot and stops the
episode clock, help (?) lists the keys (as the start does). An episode nobody drove is discarded with
the reason unless `keep_idle`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from robot_rl.data.env_recorder import EnvEpisodeRecorder
from robot_rl.envs.adapter import CanonicalEnv
from robot_rl.teleop.inputs import EPISODE_LABELS
from robot_rl.teleop.person import LocalTeleop
from robot_rl.teleop.session_status import KEY_LEGEND


@dataclass
class EnvSessionConfig:
    """Timing of a person's recording session."""

    episodes: int = 20
    """Episodes to keep (0: until interrupted)."""
    control_hz: float = 10.0
    """Steps per second of the person's time."""
    episode_time_s: float = 30.0
    """Longest episode in seconds of the person's time (the clock stops while paused)."""
    reset_time_s: float = 3.0
    """After each reset the robot holds this long, counting down, before the episode runs."""
    keep_idle: bool = False
    """Keep episodes nobody drove (discarded by default, with the reason)."""
    seed: int = 0
    """Reset seed of the first episode (the next ones count up)."""


class Pacer:
    """Sleeps until the next period of `hz` on the monotonic clock; a late step is counted, not made up."""

    def __init__(self, hz: float):
        if not hz > 0:
            raise ValueError(f"control_hz must be > 0, got {hz}")
        self.period = 1.0 / hz
        self.next = time.monotonic() + self.period
        self.missed = 0

    def wait(self) -> None:
        now = time.monotonic()
        if now < self.next:
            time.sleep(self.next - now)
            self.next += self.period
        else:
            self.missed += 1
            self.next = now + self.period


def record_env_session(env: CanonicalEnv, recorder: EnvEpisodeRecorder, person: LocalTeleop,
                       config: EnvSessionConfig, say: Callable[[str], None] = print,
                       observer: Any = None) -> dict[str, Any]:
    """Runs the session (see the module) on `env` (raw states: `normalize=False`); returns its summary."""
    pacer = Pacer(config.control_hz)
    kept = discarded = rerecorded = attempt = 0
    reasons: list[str] = []
    say(f"keys: {KEY_LEGEND[person.mapping.device]}")
    while config.episodes == 0 or kept < config.episodes:
        number = recorder.num_episodes + 1
        raw, _ = env.reset(seed=config.seed + attempt)
        attempt += 1
        if config.reset_time_s > 0:
            say(f"reset: episode {number} starts in {config.reset_time_s:g} s, get ready")
        for _ in range(int(round(config.reset_time_s * config.control_hz))):
            person.poll()  # keys pressed while waiting are not carried into the episode
            pacer.wait()
        say(f">>> episode {number}: GO ({config.episode_time_s:g} s)\a")
        outcome = _run_episode(env, recorder, person, config, pacer, raw, say, observer)
        if outcome is None:
            recorder.discard_episode()
            rerecorded += 1
            say(f"episode {number} dropped: re-recording it")
            continue
        person_steps, steps, final, label, check = outcome
        if person_steps == 0 and not config.keep_idle:
            recorder.discard_episode()
            discarded += 1
            reasons.append(f"nobody drove it ({steps} steps)")
            say(f"episode {number} discarded: nobody drove it ({steps} steps); --keep-idle keeps such episodes")
            continue
        if label in ("success", "failure") and (label == "success") != check:
            say(f"WARNING: episode {number} labelled {label}, but the environment's own success check says "
                f"{'success' if check else 'failure'}; both are stored (label and check)")
        recorder.end_episode(final, success_check=check)
        kept += 1
        say(f"episode {number} kept: {steps} steps, {person_steps} driven by you")
    return {"episodes_recorded": kept, "episodes_discarded": discarded, "episodes_rerecorded": rerecorded,
            "discard_reasons": reasons, "missed_periods": pacer.missed}


def _run_episode(env: CanonicalEnv, recorder: EnvEpisodeRecorder, person: LocalTeleop, config: EnvSessionConfig,
                 pacer: Pacer, raw, say, observer) -> tuple[int, int, Any, str | None, bool] | None:
    """One episode staged in `recorder` (not committed): (steps the person drove, steps, final observation, the
    person's label, the environment's own success where it ended), or None when the person asked to re-record it."""
    clock_s = 0.0
    steps = person_steps = 0
    paused, label, gripper = False, None, None
    while True:
        now = person.poll()
        if gripper is None or not set(now.events) & set(EPISODE_LABELS):
            gripper = now.gripper  # a label resets the held gripper for the next episode, not for this last step
        for event in now.events:
            if event == "pause":
                paused = not paused
                say("PAUSED: the robot holds and the clock stops; p resumes" if paused else "resumed")
            elif event == "rerecord":
                return None
            elif event == "help":
                say(f"keys: {KEY_LEGEND[person.mapping.device]}")
            elif event in ("success", "failure", "reset"):
                label = event
        if paused:
            pacer.wait()
            continue
        action = env.adapter.person_action(now.twist, gripper)  # nobody driving: motion 0, gripper held
        next_raw, reward, terminated, truncated, info = env.step(action)
        steps += 1
        person_steps += int(now.engaged)
        clock_s += pacer.period
        out_of_time = clock_s >= config.episode_time_s - 1e-9
        ended = terminated or truncated or out_of_time or label is not None
        # A person's label decides; otherwise the environment's success where the episode ended.
        success = {"success": True, "failure": False}.get(label, bool(info["is_success"]) if ended else None)
        recorder.add_step(raw, action, reward, terminated, not terminated and ended, bool(now.engaged), success)
        if observer is not None:
            observer.step(step=steps, cameras={k: raw[k] for k in env.adapter.cameras},
                          state=raw["state"] if env.adapter.cameras else raw, action=action,
                          policy_action=None, driver="person" if now.engaged else "holding", reward=reward,
                          value=None, done_probability=None, episode=recorder.num_episodes, wall_time=time.time())
        raw = next_raw
        if ended:
            if observer is not None:
                observer.episode_end(recorder.num_episodes, success, label or ("success" if success else "done"))
            return person_steps, steps, raw, label, bool(info["is_success"])
        pacer.wait()
