"""LeRobot's HIL-SERL learner and actor as benchmarks/peer_lerobot.py runs them: their commands and environment,
what their own logs say, the learner killed and resumed by LeRobot's own resume path, and the judge of their
snapshots (a `snapshot_judge.py` process in LeRobot's venv).

Everything LeRobot runs is its own code from `.venv-peer-lerobot` (`python -m lerobot.rl.learner`; the actor's
`actor_cli` through `snapshotting_actor.py`), configured by `gym_hil_pick_cube.json` plus what the benchmark forces
on the command line: the demonstrations (`dataset.root`), the environment (`env.task`), the step budget
(`policy.online_steps`), the seed, a free gRPC port, one output directory per process, the image encoder (our
shipped gym-hil encoder's conv stacks as a local Hugging Face model, `hf_encoder.py`, written into the run
directory: `policy.vision_encoder_name`), and for a restart check `save_freq` when asked. Offline and untracked:
HF_HUB_OFFLINE=1, WANDB_MODE=disabled, HF_HOME in the run directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from graph_realtime import stop_group  # benchmarks/, on the path of peer_lerobot.py

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
ROOT = BENCHMARKS.parent
VENV = ROOT / ".venv-peer-lerobot"
PYTHON = VENV / "bin" / "python"
CONFIG = HERE / "gym_hil_pick_cube.json"
ENCODER_DIRNAME = "robot_rl_gym_hil_encoder"
"""The run directory's copy of our encoder as a Hugging Face model (the config's `policy.vision_encoder_name`)."""
STARTUP_S = 600.0
"""How long a learner may take to open its gRPC server (imports, the offline buffer) before the run fails."""
RECONNECT_S = 60.0
"""How long a resumed learner waits for the running actor to reconnect before the actor is restarted."""
STOP_S = 60.0

OPTIMIZATION_STEP = re.compile(r"\[LEARNER\] Number of optimization step: (\d+)")
FIRST_UPDATE = re.compile(r"^\w+ (?:\[PID: \d+\] )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) .*Number of optimization step: 1$",
                          re.MULTILINE)
"""LeRobot's log lines start with the level and the local time (lerobot.utils.utils.init_logging)."""
EPISODE_END = re.compile(r"\[ACTOR\] Global step (\d+): Episode reward: (-?[\d.]+(?:e-?\d+)?)")
ACTOR_STEPS = re.compile(r"\[snapshotting_actor\] env steps (\d+)")
PROBLEM = re.compile(r"Traceback|Error|ERROR|CRITICAL")
SERVER_UP = "[LEARNER] gRPC server started"
TRAINING = "Starting learner thread"
"""Logged once the learner has loaded its replay buffers (a resumed one: from its checkpoint) and starts training."""
CRASHED = "Traceback (most recent call last)"
ACTOR_CONNECTED = "[LEARNER] Received request to receive transitions from the Actor"
ACTOR_DONE = "[ACTOR] Policy process joined"


def version() -> str | None:
    """The lerobot release installed in LeRobot's venv (its dist-info), None without the venv."""
    found = sorted(VENV.glob("lib/python*/site-packages/lerobot-*.dist-info"))
    return found[-1].name.removeprefix("lerobot-").removesuffix(".dist-info") if found else None


def log_facts(learner_log: str, actor_log: str) -> dict:
    """What LeRobot's own logs say about a run (it sends losses and episode rewards only to wandb, which is off):
    the learner's optimization steps and when the first ended (epoch seconds), the actor's training episodes and how
    many earned the success reward, and the first problem lines."""
    steps = [int(n) for n in OPTIMIZATION_STEP.findall(learner_log)]
    episodes = [(int(step), float(reward)) for step, reward in EPISODE_END.findall(actor_log)]
    problems = [line.strip() for text in (learner_log, actor_log) for line in text.splitlines()
                if PROBLEM.search(line) and "Waiting for Learner to be ready" not in line]
    first = FIRST_UPDATE.search(learner_log)
    first_at = time.mktime(time.strptime(first.group(1), "%Y-%m-%d %H:%M:%S")) if first else None
    return {"learner_updates": max(steps, default=0), "first_update_at": first_at, "actor_episodes": len(episodes),
            "actor_successes": sum(reward >= 1.0 for _, reward in episodes),
            "actor_last_step": episodes[-1][0] + 1 if episodes else 0, "problems": problems[:5]}


def process_env(run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", WANDB_MODE="disabled", HF_HOME=str(run_dir / "hf_home"),
               HF_LEROBOT_HOME=str(run_dir / "hf_lerobot"),
               PYTHONPATH=os.pathsep.join(map(str, (ROOT, BENCHMARKS, HERE))))
    env.setdefault("MUJOCO_GL", "osmesa")
    env.setdefault("PYOPENGL_PLATFORM", env["MUJOCO_GL"])
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LeRobotRun:
    """One seed of LeRobot's learner and actor in `run_dir`, `budget` env steps, snapshots every `snapshot_every`."""

    def __init__(self, run_dir: Path, dataset: Path, encoder: Path, seed: int, budget: int, snapshot_every: int,
                 save_freq: int | None = None):
        """`encoder`: our encoder's directory, which LeRobot's policy loads as its (frozen) vision encoder."""
        self.run_dir, self.dataset, self.seed, self.budget = run_dir, dataset, seed, budget
        self.encoder, self.hf_encoder = encoder, run_dir / ENCODER_DIRNAME
        self.snapshot_every, self.save_freq = snapshot_every, save_freq
        self.snapshots = run_dir / "snapshots"
        self.env = process_env(run_dir)
        self.port = free_port()
        self.learner: subprocess.Popen | None = None
        self.actor: subprocess.Popen | None = None
        self.learner_logs: list[Path] = []
        self.actor_logs: list[Path] = []
        self.actor_offset = 0
        """Env steps played by this run's earlier actors (a restart check restarts the actor)."""

    def lerobot_args(self, online_steps: int) -> list[str]:
        from random_cube_env import TASK

        args = [f"--config_path={CONFIG}", f"--dataset.root={self.dataset}", f"--env.task={TASK}",
                f"--policy.actor_learner_config.learner_port={self.port}", f"--policy.online_steps={online_steps}",
                f"--seed={self.seed}", f"--policy.vision_encoder_name={self.hf_encoder}"]
        return args + ([f"--save_freq={self.save_freq}"] if self.save_freq else [])

    def _spawn(self, cmd: list[str], logs: list[Path], name: str) -> subprocess.Popen:
        log = self.run_dir / f"{name}-{len(logs) + 1}.log"
        logs.append(log)
        with open(log, "wb") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.run_dir,
                                    start_new_session=True)

    def start_learner(self, resume: bool = False) -> None:
        if resume:  # LeRobot's resume: the last checkpoint's own config, resume=true
            args = [f"--config_path={self.last_checkpoint() / 'pretrained_model' / 'train_config.json'}",
                    "--resume=true"]
        else:
            args = [*self.lerobot_args(self.budget), f"--output_dir={self.run_dir / 'learner'}"]
        self.learner = self._spawn([str(PYTHON), "-m", "lerobot.rl.learner", *args], self.learner_logs, "learner")

    def start_actor(self) -> None:
        cmd = [str(PYTHON), str(HERE / "snapshotting_actor.py"), "--snapshot-dir", str(self.snapshots),
               "--snapshot-every", str(self.snapshot_every), "--budget", str(self.budget),
               "--step-offset", str(self.actor_offset), *self.lerobot_args(self.budget - self.actor_offset),
               f"--output_dir={self.run_dir / f'actor-{len(self.actor_logs) + 1}'}"]
        self.actor = self._spawn(cmd, self.actor_logs, "actor")

    def last_checkpoint(self) -> Path:
        return self.run_dir / "learner" / "checkpoints" / "last"

    def text(self, logs: list[Path], last_only: bool = False, until: str | None = None) -> str:
        """The logs' text (`until`: each cut where that line first appears)."""
        texts = [p.read_text(errors="replace") for p in (logs[-1:] if last_only else logs) if p.exists()]
        return "".join(text.split(until, 1)[0] if until else text for text in texts)

    def actor_steps(self) -> int:
        """Env steps played so far, as the actors' logs show them (at episode ends; at exit, exactly)."""
        text = self.text(self.actor_logs, last_only=True)
        exact = ACTOR_STEPS.findall(text)
        return int(exact[-1]) if exact else self.actor_offset + log_facts("", text)["actor_last_step"]

    def wait_for_line(self, process: subprocess.Popen, logs: list[Path], line: str, timeout_s: float) -> bool:
        """Whether `line` appeared in the process's current log before it exited, logged a traceback (a LeRobot
        process whose main thread died can live on with its gRPC thread) or `timeout_s` passed."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            text = self.text(logs, last_only=True)
            if line in text:
                return True
            if process.poll() is not None or CRASHED in text:
                return False
            time.sleep(1.0)
        return False

    def run(self, kill_learner_at: int | None = None) -> dict:
        """Learner, then actor, until the actor has played the budget; returns the run's facts and timings."""
        self.run_dir.mkdir(parents=True)
        # before the clock: our encoder is a file ready before our own run starts, too
        written = subprocess.run([str(PYTHON), str(HERE / "hf_encoder.py"), str(self.encoder), str(self.hf_encoder)],
                                 env=self.env, capture_output=True, text=True)
        if written.returncode:
            raise SystemExit(f"peer_lerobot: our encoder could not be written for LeRobot:\n{written.stderr[-2000:]}")
        started = time.time()
        try:
            return self._play(started, kill_learner_at)
        except BaseException:  # Ctrl-C or a crash here: the processes live in sessions of their own, stop them
            self.stop()
            raise

    def _play(self, started: float, kill_learner_at: int | None) -> dict:
        """The run itself, from the learner's start (`started`) to the actor's last step."""
        self.start_learner()
        if not self.wait_for_line(self.learner, self.learner_logs, SERVER_UP, STARTUP_S):
            raise SystemExit(f"peer_lerobot: LeRobot's learner did not open its gRPC server; its log ended with:\n"
                             f"{self.text(self.learner_logs)[-3000:]}")
        self.start_actor()
        restart, ended = None, "budget played"
        deadline = started + self.budget / 10.0 * 3 + STARTUP_S
        while True:
            time.sleep(1.0)
            if ACTOR_DONE in self.text(self.actor_logs, last_only=True):
                break
            learner_crashed = CRASHED in self.text(self.learner_logs, last_only=True)
            if self.actor.poll() is not None or self.learner.poll() is not None or learner_crashed \
                    or time.time() > deadline:
                ended = ("the actor exited" if self.actor.poll() is not None else
                         "the learner exited" if self.learner.poll() is not None else
                         "the learner crashed" if learner_crashed else "out of time")
                break
            if kill_learner_at is not None and restart is None and self.actor_steps() >= kill_learner_at:
                restart = self.kill_learner_and_resume()
                if not restart["continued"]:
                    ended = "the learner did not resume"
                    break
        wall_s = time.time() - started
        # Before the shutdown's noise: an actor whose loop ended closes its queues under its gRPC threads.
        facts = log_facts(self.text(self.learner_logs), self.text(self.actor_logs, until=ACTOR_DONE))
        self.stop()
        return {**facts, "ended": ended, "wall_s": round(wall_s, 1), "env_steps": self.actor_steps(),
                "started": started, "restart": restart, "save_freq": self.save_freq}

    def kill_learner_and_resume(self) -> dict:
        """SIGKILLs the learner, restarts it with LeRobot's resume path (the last checkpoint) and, when the actor
        does not reconnect by itself, restarts the actor too, as its user would. Says what was lost."""
        steps_at_kill = self.actor_steps()
        updates_at_kill = log_facts(self.text(self.learner_logs, last_only=True), "")["learner_updates"]
        os.killpg(self.learner.pid, signal.SIGKILL)
        self.learner.wait()
        checkpoint = checkpoint_state(self.last_checkpoint())
        facts = {"killed_at_env_steps": steps_at_kill, "updates_at_kill": updates_at_kill, "checkpoint": checkpoint}
        self.start_learner(resume=True)
        if not self.wait_for_line(self.learner, self.learner_logs, TRAINING, STARTUP_S):
            tail = log_facts(self.text(self.learner_logs, last_only=True), "")["problems"]
            return {**facts, "continued": False, "why": tail or ["the resumed learner never started training"],
                    "updates_lost": updates_at_kill, "env_steps_lost": steps_at_kill}
        reconnected = self.wait_for_line(self.learner, self.learner_logs, ACTOR_CONNECTED, RECONNECT_S)
        restarted_at = None
        if not reconnected:
            self.stop_process(self.actor)
            self.actor_offset = self.actor_steps()
            if self.actor_offset < self.budget:  # a short run's actor may have played it all meanwhile
                restarted_at = self.actor_offset
                self.start_actor()
        kept = checkpoint["online_frames"] if checkpoint else 0
        # Lost: what the resumed learner lacks of what was played before it could receive again.
        return {**facts, "continued": True, "actor_reconnected_by_itself": reconnected,
                "actor_restarted_at_env_steps": restarted_at,
                "updates_lost": updates_at_kill - (checkpoint["optimization_step"] if checkpoint else 0),
                "env_steps_lost": (steps_at_kill if reconnected else self.actor_offset) - kept}

    @staticmethod
    def stop_process(process: subprocess.Popen | None) -> None:
        """SIGINT (LeRobot's processes shut down on it), then SIGKILL if it is still there after STOP_S."""
        if process is not None:
            stop_group(process, STOP_S)

    def stop(self) -> None:
        self.stop_process(self.actor)
        self.stop_process(self.learner)


def checkpoint_state(checkpoint: Path) -> dict | None:
    """The learner's last checkpoint as its resume reads it: optimization and interaction step, and the online
    transitions it saved (its replay buffer, written as a dataset); None when there is none."""
    state = checkpoint / "training_state" / "training_state.pt"
    if not state.is_file():
        return None
    import torch

    saved = torch.load(state, weights_only=True)
    info = checkpoint.parents[1] / "dataset" / "meta" / "info.json"
    frames = json.loads(info.read_text())["total_frames"] if info.is_file() else 0
    return {"optimization_step": int(saved["step"]), "interaction_step": int(saved["interaction_step"]),
            "online_frames": frames}


class SnapshotJudge:
    """`snapshot_judge.py` in LeRobot's venv: judge(snapshot, max_failures) -> robot_rl's evaluator result."""

    def __init__(self, run_dir: Path, episodes: int, seed: int):
        from random_cube_env import TASK

        self.episodes, self.seed = episodes, seed
        self.log = open(run_dir / "judge.log", "wb")
        self.process = subprocess.Popen([str(PYTHON), str(HERE / "snapshot_judge.py"), "--config_path", str(CONFIG),
                                         "--env.task", TASK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, env=process_env(run_dir), cwd=run_dir, text=True)

    def __call__(self, snapshot: Path, max_failures: int | None) -> dict:
        request = {"snapshot": str(snapshot), "episodes": self.episodes, "seed": self.seed,
                   "max_failures": max_failures}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise SystemExit(f"peer_lerobot: LeRobot's snapshot judge exited; see {self.log.name}")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=STOP_S)
        self.log.close()


def snapshot_paths(folder: Path) -> list[Path]:
    """LeRobot snapshots in the order they were saved (names start with the wall time in ns)."""
    return sorted((p for p in folder.glob("*-s*") if p.is_dir()), key=lambda p: int(p.name.split("-")[0]))


def env_steps_of(snapshot: Path) -> int:
    return int(snapshot.name.rsplit("-s", 1)[1])

