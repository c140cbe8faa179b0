"""A training or recording session on the console: the graph's nodes run under a `Supervisor`
(crashed nodes respawn within their restart budget) while a `Monitor` renders live progress from
/diagnostics, with each node's restarts, its new warnings and errors, and a robot gone silent.

A training run owns its run directory (`claim_run_dir`): an existing one is refused unless the
user resumes or overwrites it, one `robot-rl train` at a time writes it, and a resumed run must
ask for the same network shapes as the one that made it (`check_resumable`).
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from robot_rl.outputs import TEMP_PREFIX, UserError, check_output
from robot_rl.ros.exits import AfterExit
from robot_rl.ros.node_kinds import DEPRECATED_NODE_NAMES, NODE_KINDS
from robot_rl.ros.settings import declared_params
from robot_rl.ros.supervisor import Supervisor
from robot_rl.teleop.session_status import SessionStatus

LOCK_NAME = ".lock"
_held_locks: list[IO] = []
"""Run directory locks of this process, held until it exits (the kernel drops a flock with its
process, however it ends, so a killed run never leaves its directory locked)."""


@dataclass
class RunDirClaim:
    """A run directory this process owns (`claim_run_dir`). With --overwrite the run it replaces waits aside,
    under a hidden name, until `finish` says whether the new run completed: only then is it removed."""

    run_dir: Path
    replaced: Path | None = None
    """Where the earlier run waits while this one runs (None: nothing was replaced)."""

    def finish(self, completed: bool, code: int = 1) -> Path | None:
        """Removes the replaced run when this one `completed`; otherwise puts it back at `run_dir` and keeps this
        run's files beside it (`<run>-interrupted-<time>` after Ctrl-C, `-failed-` after an error), returning
        where (None when nothing was replaced or the new run was empty)."""
        replaced, self.replaced = self.replaced, None
        if replaced is None:
            return None
        if completed:
            shutil.rmtree(replaced)
            return None
        written = [child for child in self.run_dir.iterdir() if child.name != LOCK_NAME]
        kept = None
        if written:
            kept = self.run_dir.with_name(f"{self.run_dir.name}-{'interrupted' if code == 130 else 'failed'}-"
                                          f"{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(self.run_dir, kept)
        else:
            shutil.rmtree(self.run_dir)
        os.replace(replaced, self.run_dir)
        print(f"robot_rl: --overwrite: the run did not complete, so the run it was to replace is back in "
              f"{self.run_dir}" + (f"; this run's files are in {kept}" if kept else ""), file=sys.stderr, flush=True)
        return kept


def _replaced_name(run_dir: Path, pid: int | str = "*") -> str:
    return f"{TEMP_PREFIX}{run_dir.name}-replaced-{pid}"


def _lock(run_dir: Path, sign: bool = True) -> IO:
    """An exclusive lock on `run_dir` (its .lock file names the holder's pid: with `sign`, this process's);
    UserError when another holds it."""
    lock = open(run_dir / LOCK_NAME, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().strip() or "unknown"
        lock.close()
        raise UserError(f"run directory {run_dir} is in use by another robot-rl train (pid {owner}); "
                        "wait for it to end or choose another --run-dir") from None
    if sign:
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
    return lock


def claim_run_dir(run_dir: Path, resume: bool, overwrite: bool) -> RunDirClaim:
    """Makes `run_dir` this process's: refuses an existing one unless `resume` (carry on with its
    checkpoint, journal, counters and logs) or `overwrite` (a new run in its place; the old one is
    moved aside and removed only when the new one completes, see RunDirClaim), and locks it against
    a second `robot-rl train`. Raises UserError with a one-line reason, having changed nothing."""
    check_output(run_dir, "run directory", overwrite=overwrite, resume=resume, resumable=True)
    left = sorted(run_dir.parent.glob(_replaced_name(run_dir))) if run_dir.parent.is_dir() else []
    if left:  # a `robot-rl train --overwrite` that was killed before its run completed
        raise UserError(f"{left[0]} holds the run an --overwrite of {run_dir} was replacing when it was killed: "
                        f"move it back to {run_dir} (or remove it) first")
    claim = RunDirClaim(run_dir)
    if overwrite and run_dir.is_dir() and any(child.name != LOCK_NAME for child in run_dir.iterdir()):
        held = _lock(run_dir, sign=False)  # not while another robot-rl train writes it; its files stay as they are
        claim.replaced = run_dir.with_name(_replaced_name(run_dir, os.getpid()))
        os.replace(run_dir, claim.replaced)
        held.close()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        _held_locks.append(_lock(run_dir))
    except BaseException:
        claim.finish(completed=False)
        raise
    if resume:
        adopt_renamed_logs(run_dir)  # a run made before the nodes' renaming keeps its logs
    return claim


TRAINING_ROLES = ("actor", "learner")
"""The node roles that make a run what it is: a run directory resumes only with the same nodes in them."""

NETWORK_PARAMETERS = {"learner": ("task", "hidden_dims", "num_critics", "grasp_critic", "encoder"),
                      "ppo_learner": ("num_envs", "actor_hidden", "critic_hidden", "activation", "history_steps",
                                      "history_latent_dim", "observation_normalization")}
"""Parameters of each learner kind that decide its networks' shapes (and a PPO learner's rollout storage): a run
directory resumes only with the same ones."""


def _earlier_params(sections: Mapping, spec) -> dict:
    # params.yaml names nodes by their qualified names ("/learner"); runs before fleets by node names
    return (sections.get(spec.qualified_name) or sections.get(spec.name) or {}).get("ros__parameters", {})


def check_resumable(run_dir: Path, specs) -> None:
    """A resumed run must be the same task as the run that made `run_dir`, and build each learner's networks
    as that run did (its checkpoint holds their weights); raises UserError naming the first setting that
    differs. Reads only: call it before anything is written."""
    earlier_path = run_dir / "params.yaml"
    if not earlier_path.is_file():
        if {child.name for child in run_dir.iterdir()} <= {LOCK_NAME, "secret.key"}:
            return  # claimed (perhaps by a train still starting), no node started yet: nothing to compare
        raise UserError(f"--resume: {run_dir} holds no params.yaml, so no robot-rl train run to carry on; "
                        "use --overwrite or another --run-dir")
    try:
        sections = yaml.safe_load(earlier_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"--resume: {earlier_path} is not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(sections, dict):
        raise UserError(f"--resume: {earlier_path} holds no node sections")
    tasks = {section["ros__parameters"]["task"] for section in sections.values() if isinstance(section, dict)
             and isinstance(section.get("ros__parameters"), dict) and "task" in section["ros__parameters"]}
    now = {spec.parameters["task"] for spec in specs if "task" in spec.parameters}
    if tasks and now and tasks != now:
        raise UserError(f"--resume: run directory {run_dir} was made for task {', '.join(sorted(tasks))}; this run "
                        f"is {', '.join(sorted(now))}: use --overwrite or another --run-dir")
    # A task's actor and learner are its training (a graph whose nodes name no task, as the quadrotor's, too)
    nodes_before = {DEPRECATED_NODE_NAMES.get(key.rsplit("/", 1)[-1], key.rsplit("/", 1)[-1]) for key in sections}
    trainers_before = sorted(name for name in nodes_before
                             if name in NODE_KINDS and NODE_KINDS[name].role in TRAINING_ROLES)
    trainers_now = sorted({spec.name for spec in specs if spec.kind.role in TRAINING_ROLES})
    if trainers_before != trainers_now:
        raise UserError(f"--resume: run directory {run_dir} was trained by {', '.join(trainers_before) or 'no node'}; "
                        f"this run's graph trains with {', '.join(trainers_now)}: use --overwrite or another --run-dir")
    for spec in specs:
        names = NETWORK_PARAMETERS.get(spec.name)
        if names is None:
            continue
        earlier = _earlier_params(sections, spec)
        defaults = {name: param.default for name, param in declared_params(spec.name).items()}
        for name in names:
            before, now = earlier.get(name, defaults[name]), spec.parameters.get(name, defaults[name])
            if _plain(before) != _plain(now):
                raise UserError(f"run directory {run_dir} was made with {spec.name}.{name}={before}; this run asks "
                                f"for {now}: use the same setting, or --overwrite / another --run-dir")


def _plain(value):
    """A parameter value as params.yaml holds it (a tuple default as the list it was written as)."""
    return list(value) if isinstance(value, tuple) else value


def adopt_renamed_logs(run_dir: Path) -> None:
    """A run directory made before `sim` and `actor` became `arm_sim` and `arm_actor`: their logs
    (`logs/<node>.log`, what a resumed run appends to) go on under the new names. Nothing else in a run
    directory is named after a node (the actor's outbox and progress are named after its actor_id)."""
    logs = run_dir / "logs"
    for old, new in DEPRECATED_NODE_NAMES.items():
        before, now = logs / f"{old}.log", logs / f"{new}.log"
        if before.is_file() and not now.exists():
            os.replace(before, now)
            print(f"robot_rl: {before} (made before the node {old!r} became {new!r}) continues as {now}",
                  file=sys.stderr, flush=True)


SILENT_AFTER_S = 5.0
"""An actor without a new observation for this long says the robot (or simulator) is silent."""


class Monitor:
    """Reads /diagnostics from the graph and renders live progress (rich on a terminal,
    periodic plain lines otherwise, e.g. in CI logs). With a person in the loop it also reads the
    actor's session/status and prompts the person: the countdown after a reset, GO (with the
    terminal's bell) when an episode starts, pauses, and why an episode was discarded; and lists
    the device's `keys` at the start and whenever the person asks (teleop/event "help")."""

    def __init__(self, total_steps: int, eval_episodes: int, record_episodes: int | None = None,
                 actor: str = "arm_actor", person: bool = False, keys: str = ""):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import String

        from robot_rl.ros import qos

        self.total_steps, self.eval_episodes, self.record_episodes = total_steps, eval_episodes, record_episodes
        self.actor = actor
        """The node whose diagnostics give the progress (arm_actor, car_actor)."""
        self.values: dict[str, dict[str, str]] = {}
        self.robots: dict[str, dict[str, str]] = {}
        """A fleet's actors' diagnostics by robot namespace."""
        rclpy.init(args=[])
        self.rclpy = rclpy
        self.node = rclpy.create_node("robot_rl_monitor")
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.status: SessionStatus | None = None
        self.keys = f"keys: {keys}" if keys else ""
        self._prompts: list[str] = [self.keys] if self.keys else []
        if person:
            self.node.create_subscription(String, "session/status", self._on_status, qos.EVENTS)
            self.node.create_subscription(String, "teleop/event", self._on_teleop_event, qos.EVENTS)
        self.started = time.monotonic()
        self.last_plain = 0.0
        self._reported_silence = False

    def _on_status(self, msg) -> None:
        try:
            status = SessionStatus.from_json(msg.data)
        except ValueError:
            return  # the actor's own message; a malformed one is the view's to count
        self._prompts += person_prompts(self.status, status)
        self.status = status

    def _on_teleop_event(self, msg) -> None:
        if msg.data == "help" and self.keys:
            self._prompts.append(self.keys)

    def prompts(self) -> list[str]:
        """Prompts for the person since the last call (print each on a line of its own)."""
        out, self._prompts = self._prompts, []
        return out

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            namespace, _, name = status.name.strip("/").rpartition("/")
            self.values[name] = values
            if namespace and name == self.actor:  # a fleet's robot (robot0/arm_actor)
                self.robots[namespace] = values

    def spin_once(self) -> None:
        self.rclpy.spin_once(self.node, timeout_sec=0.1)

    def silent_for(self) -> float:
        """Seconds the actor has gone without an observation, when that exceeds SILENT_AFTER_S (else 0)."""
        age = float(self.values.get(self.actor, {}).get("observation_age_s", 0.0))
        return age if age > SILENT_AFTER_S else 0.0

    def silence_notice(self) -> str | None:
        """A one-time message when the robot falls silent (again after it spoke in between)."""
        silent = self.silent_for()
        if not silent:
            self._reported_silence = False
            return None
        if self._reported_silence:
            return None
        self._reported_silence = True
        return (f"[{self.actor}] WARN no observation from the robot for {silent:.0f} s: the robot or simulator "
                "publishes nothing (its warnings and errors show here; its log is in the run's logs/)")

    def line(self, restarts: Mapping[str, int] | None = None) -> str:
        a, l = self.values.get(self.actor, {}), self.values.get("learner", {})
        elapsed = time.monotonic() - self.started
        person = "PERSON DRIVING" if a.get("teleop_engaged") == "True" else "policy driving"
        if self.status is not None:
            person = self.status.headline()
        if self.record_episodes is not None:
            target = f"/{self.record_episodes}" if self.record_episodes else ""
            if self.status is None:
                person = "PERSON DRIVING" if a.get("teleop_engaged") == "True" else "robot holding"
                person += f"  episode {a.get('episodes', 0)} step {a.get('episode_steps', 0)}"
            counts = (f"recording  kept {a.get('episodes_recorded', 0)}{target}  "
                      f"discarded {a.get('episodes_discarded', 0)}")
            # A person's headline first: a line redrawn in place is cut at the terminal's width.
            shown = f"{person}  {counts}" if self.status is not None else f"{counts}  {person}"
            return f"[{elapsed:6.0f}s] {shown}{self._health(restarts)}"
        if a.get("evaluating") == "True":
            phase = f"evaluating {a.get('eval_done', 0)}/{self.eval_episodes}  success {a.get('eval_success_rate', '-')}"
        else:
            # With a person in the loop the headline (`person`) names the episode and its clock.
            last = f"last return {a.get('last_return', '-')}"
            episode = last if self.status is not None else \
                f"episode {a.get('episodes', 0)} (step {a.get('episode_steps', 0)}, {last})"
            progress = (f"step {a.get('train_steps', 0)}/{self.total_steps}  {episode}  "
                        f"success(last20) {a.get('success_rate_last20', '-')}  "
                        f"interventions(last20) {a.get('intervention_rate_last20', '-')}")
            phase = f"{person}  {progress}" if self.status is not None else f"{progress}  {person}"
            if "laps" in a:  # the car: practice instead of interventions
                best = f" (best {float(a['best_lap_s']):.2f} s)" if a["laps"] != "0" and "best_lap_s" in a else ""
                phase = (f"step {a.get('train_steps', 0)}/{self.total_steps}  episode {a.get('episodes', 0)}  "
                         f"laps {a['laps']}{best}  crashes {a.get('crashes', 0)}  "
                         f"stuck {a.get('stuck', 0)}{'  recovering' if a.get('recovering') == 'True' else ''}")
        if len(self.robots) > 1:  # a fleet: each robot's progress instead of the newest actor's
            phase = "  ".join(
                f"{robot}: step {v.get('train_steps', 0)} ep {v.get('episodes', 0)} succ {v.get('success_rate_last20', '-')}"
                f" v{v.get('policy_version', 0)}{_latency_columns(v)}"
                + (f" eval {v.get('eval_done', 0)}/{self.eval_episodes}" if v.get("evaluating") == "True" else "")
                for robot, v in sorted(self.robots.items()))
        lag = int(float(l.get("policy_version", 0))) - int(float(a.get("policy_version", 0)))
        # The achieved update-to-data ratio (lockstep holds it; on the wall clock it is what the learner's CPU allows).
        ratio = f", {l['updates_per_transition']} per transition" if "updates_per_transition" in l else ""
        latency = _latency_columns(a)
        return (f"[{elapsed:6.0f}s] {phase}  policy v{a.get('policy_version', 0)} (lag {max(lag, 0)})  "
                f"updates {l.get('updates', 0)} ({l.get('updates_per_s', '-')}/s{ratio}){latency}  "
                f"buffer {l.get('online_size', 0)}+{l.get('demo_size', 0)} demo  "
                f"unacked {a.get('outbox_pending', 0)}{self._health(restarts)}")

    def _health(self, restarts: Mapping[str, int] | None) -> str:
        """The status line's tail: node restarts so far and a silent robot."""
        out = ""
        if restarts:
            out += "  restarts " + ", ".join(f"{name} {count}" for name, count in restarts.items())
        if self.silent_for():
            out += f"  NO OBSERVATION for {self.silent_for():.0f} s"
        return out

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.shutdown()


def _latency_columns(actor: Mapping[str, str]) -> str:
    """The control callback's p99 and, in a column of its own, the p99 of the time steps waited for the learner
    (lockstep's update ratio) or late rewards: a long wait is a busy learner, not a slow robot."""
    if actor.get("control_ms_p99", "-") == "-":
        return ""
    return f"  control p99 {actor['control_ms_p99']} ms  learner wait p99 {actor.get('learner_wait_ms_p99', '-')} ms"


def person_prompts(before: SessionStatus | None, now: SessionStatus) -> list[str]:
    """What to tell the person when the session status changes from `before` to `now` ("\a" rings
    the terminal's bell when an episode starts)."""
    out = []
    if now.message and (before is None or now.message != before.message):
        out.append(now.message)
    changed = before is None or now.phase != before.phase or now.episode != before.episode
    if not changed:
        return out
    if now.phase == "countdown" and now.countdown_s > 0:
        out.append(f"reset: episode {now.episode} starts in {math.ceil(now.countdown_s)} s, get ready")
    elif now.phase == "running" and (before is None or before.phase != "paused"):
        out.append(f"\a>>> episode {now.episode}: GO ({now.episode_time_s:.0f} s)")
    elif now.phase == "running":
        out.append(f"resumed: episode {now.episode} at {now.clock_text()}")
    elif now.phase == "paused":
        out.append("PAUSED: the robot holds (a simulator freezes) and the clock stops; the pause key again goes on")
    elif now.phase == "review":
        out.append(f"that was the last episode: re-record within {math.ceil(now.countdown_s)} s records it again; "
                   "otherwise it is kept and the session ends")
    return out


REDRAW_PERIOD_S = 1.0
"""How often at least a status line redrawn in place is updated: its episode clock counts seconds."""
CLEAR_LINE = "\r\x1b[K"


def run_graph(specs, params_path: Path, run_dir: Path, env: dict, monitor: Monitor, plain: bool,
              status_period: float, redraw: bool = False) -> tuple[dict[str, int], int]:
    """Starts the nodes as separate processes and shows live status until an exit ends the run (the
    last actor finished, or a node the run needs is gone for good: `robot_rl.ros.exits`) or Ctrl-C.
    With `redraw` (a person at this terminal, which the keyboard puts in raw mode: lines carry their own
    carriage returns) the plain status line is redrawn in place, at least every REDRAW_PERIOD_S (its running
    clock readable), and the prompts go above it. Returns (exit codes, the command's code)."""
    clear, line_end = (CLEAR_LINE, "\r\n") if redraw else ("", "\n")
    period = min(status_period, REDRAW_PERIOD_S) if redraw else status_period
    supervisor = Supervisor(specs, params_path, run_dir / "logs", env)
    interrupted = {"flag": False}
    signal.signal(signal.SIGINT, lambda *_: interrupted.update(flag=True))
    signal.signal(signal.SIGTERM, lambda *_: interrupted.update(flag=True))
    supervisor.start()
    print(f"robot_rl: started {', '.join(s.key for s in specs)} as separate processes; logs in {run_dir / 'logs'}",
          flush=True)
    reason, code = "", 0
    live = None
    try:
        if sys.stdout.isatty() and not plain:
            from rich.live import Live

            live = Live(monitor.line(), refresh_per_second=4, transient=False)
            live.start()
        while not reason:
            monitor.spin_once()
            if interrupted["flag"]:
                reason, code = "interrupted by the user (Ctrl-C)", 130
            for node, _ in supervisor.exited():
                if node.decision.after is AfterExit.END_RUN:
                    reason, code = node.decision.reason, int(node.decision.failed)
                    if node.decision.failed:
                        print(f"--- last lines of {node.log_path} ---\n{supervisor.log_tail(node)}", file=sys.stderr)
            silence = monitor.silence_notice()
            for notice in supervisor.notices() + ([silence] if silence else []) + monitor.prompts():
                # Under a rich Live display, print() goes above the live line.
                print(f"{clear}robot_rl: {notice}", end=line_end, flush=True)
                monitor.last_plain = 0.0 if redraw else monitor.last_plain  # the status line again, under it
            if live is not None:
                live.update(monitor.line(supervisor.restarts))
            elif time.monotonic() - monitor.last_plain >= period:
                monitor.last_plain = time.monotonic()
                line = monitor.line(supervisor.restarts)
                if redraw:
                    print(f"{CLEAR_LINE}{line[:shutil.get_terminal_size().columns - 1]}", end="", flush=True)
                else:
                    print(line, flush=True)
    finally:
        if live is not None:
            live.stop()
        print(f"{clear}robot_rl: shutting down the graph: {reason or 'error'}", flush=True)
        codes = supervisor.stop()
        monitor.close()
    return codes, code
