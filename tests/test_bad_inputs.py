"""Bad inputs across `robot-rl` subcommands and node parameters: each one gives exactly one line on
stderr naming the offending key, path or value, exit code 2, no traceback, and changes nothing on
disk (every file in the working directory checksummed before and after; no new file or folder). Each runs in a
process of its own, forked from one that has imported the command (a few in a new interpreter as well)."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JUGGLE_POLICY = REPO / "policies" / "quad_juggle"


LOOPBACK = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1", "PYTHONWARNINGS": "ignore"}
_FORKED = multiprocessing.get_context("forkserver")
# The command's heavy imports once, in the process every forked run starts from: a fresh interpreter spent 2-4 s
# of CPU importing them per run, and the table runs the command about 60 times.
_FORKED.set_forkserver_preload(["robot_rl.cli", "robot_rl.ros.settings", "robot_rl.ros.actor_node",
                                "robot_rl.nodes.learner", "zarr", "mujoco"])


def robot_rl(args: list[str], cwd: Path, timeout: float = 180.0, env: dict | None = None,
             fresh: bool = False) -> subprocess.CompletedProcess:
    """The command as `python -m robot_rl.cli` runs it, in `cwd`, loopback DDS: in a process of its own forked from
    one that has imported the command (`fresh`: a new interpreter, which also shows what its imports print)."""
    env = {**os.environ, **LOOPBACK, **(env or {})}
    if fresh:
        return subprocess.run([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="robot_rl-cli-") as outputs:
        out, err = Path(outputs) / "stdout", Path(outputs) / "stderr"
        process = _FORKED.Process(target=_command_in_this_process, args=(args, str(cwd), env, str(out), str(err)))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["robot-rl", *args], timeout)
        return subprocess.CompletedProcess(args, process.exitcode, out.read_text(), err.read_text())


def _command_in_this_process(args: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    """What `python -m robot_rl.cli ARGS` does after its imports, with stdin from /dev/null and stdout and stderr
    to the files `out` and `err`; exits as the interpreter would (a message of SystemExit to stderr, code 1)."""
    import traceback
    import warnings

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    warnings.simplefilter("ignore")  # PYTHONWARNINGS=ignore, which an interpreter reads when it starts
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT),
                            (2, err, os.O_WRONLY | os.O_CREAT)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = [sys.executable, *args]
    sys.path.insert(0, cwd)  # as `python -m` puts the working directory first (a user's own expert module)
    from robot_rl.cli import main

    try:
        code = main()  # as robot_rl/cli/__main__.py calls it: the arguments from sys.argv
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and folder under `root`: relative path -> content hash ('dir' for folders)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _nan_policy(src: Path, dst: Path) -> None:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "policy.safetensors"))
    name = next(k for k in sorted(tensors) if k.startswith("actor."))
    tensors[name][..., 0] = float("nan")
    save_file(tensors, str(dst / "policy.safetensors"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A user's working directory holding existing outputs and broken inputs."""
    root = tmp_path_factory.mktemp("user")
    made = robot_rl(["demos", "--task", "arm_lift", "--episodes", "1", "--out", "demos.zarr"], root)
    assert made.returncode == 0, made.stderr
    made = robot_rl(["demos", "--env", "robot_rl/ArmPickCube-v0", "--goal", "pick up the cube", "--episodes", "1",
                     "--image-size", "32", "--out", "episodes.zarr"], root)
    assert made.returncode == 0, made.stderr
    shutil.copytree(root / "demos.zarr", root / "demos_missing_reward.zarr")
    reward_chunks = [p for p in (root / "demos_missing_reward.zarr" / "reward").rglob("*")
                     if p.is_file() and not p.name.startswith(".") and p.name != "zarr.json"]
    assert reward_chunks, "the dataset has no reward chunk to delete"
    reward_chunks[0].unlink()
    shutil.copytree(JUGGLE_POLICY, root / "policy_copy")
    shutil.copytree(JUGGLE_POLICY, root / "policy_truncated")
    weights = root / "policy_truncated" / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    shutil.copytree(JUGGLE_POLICY, root / "policy_bad_card")
    (root / "policy_bad_card" / "card.json").write_text('{"obs_dim": 3, ')
    _nan_policy(JUGGLE_POLICY, root / "policy_nan")
    for name in ("existing_run", "existing_model", "existing_encoder"):
        (root / name).mkdir()
        (root / name / "keep.txt").write_text("the user's file")
    (root / "existing.mcap").write_bytes(b"not to be replaced")
    (root / "bad_syntax.yaml").write_text("robot_rl:\n  task: arm_lift\n  nodes: [sim, actor\n")
    (root / "not_a_mapping.yaml").write_text("- sim\n- actor\n")
    (root / "not_a_dataset").mkdir()
    (root / "a_file").write_text("a user's file where a directory is expected")
    (root / "user_folder").mkdir()
    (root / "user_folder" / "notes.txt").write_text("the user's notes")
    (root / "existing.png").write_bytes(b"the user's picture")
    (root / "experts.py").write_text(BAD_EXPERTS)
    made = robot_rl(["train", "--env", "Pendulum-v1", "--steps", "300", "--run-dir", "env_run"], root)
    assert made.returncode == 0, made.stderr
    made = robot_rl(["train", "--steps", "300", "--eval-episodes", "1", "--run-dir", "arm_run"], root)
    assert made.returncode == 0, made.stderr
    for name, content in (("env_run_truncated", (root / "env_run" / "policy.pt").read_bytes()[:500]),
                          ("env_run_garbage", b"not a checkpoint at all")):
        (root / name).mkdir()
        (root / name / "policy.pt").write_bytes(content)
    shutil.copytree(JUGGLE_POLICY, root / "policy_list_card")
    (root / "policy_list_card" / "card.json").write_text("[1, 2, 3]")
    shutil.copytree(JUGGLE_POLICY, root / "policy_other_task")
    card = json.loads((root / "policy_other_task" / "card.json").read_text())
    (root / "policy_other_task" / "card.json").write_text(json.dumps({**card, "task": "no_such_task"}))
    (root / "not_a_bag.mcap").write_bytes(b"not an mcap file")
    (root / "params_list.yaml").write_text("- 1\n- 2\n")
    return root


BAD_EXPERTS = """
import json
import numpy as np

def returns_text(observation, info):
    return "left"

def returns_mapping(observation, info):
    return {"torque": 1.0}

def returns_nan(observation, info):
    return np.array([np.nan], dtype=np.float32)

def returns_too_many(observation, info):
    return np.zeros(5, dtype=np.float32)

def raises(observation, info):
    raise RuntimeError("the expert's own bug")

dumps = json.dumps  # a callable of the wrong signature

NOT_CALLABLE = 3
"""
"""Experts of a careless user's module (`--expert experts:NAME`), each wrong in its own way."""


@pytest.fixture(scope="module")
def readonly(workdir) -> Path:
    """A read-only file system at <workdir>/readonly (tmpfs; needs root, as on CI), unmounted afterwards."""
    target = workdir / "readonly"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(target)], capture_output=True)
    if mounted.returncode != 0:
        target.rmdir()
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.decode().strip()}")
    yield target
    subprocess.run(["umount", str(target)], check=True)
    target.rmdir()


# (subcommand arguments, fragment the one line must contain)
BAD_INPUTS = [
    (["train", "--task", "arm_lfit"], "arm_lfit"),
    (["train", "--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
    (["train", "--steps", "-5"], "--steps"),
    (["train", "--steps", "many"], "many"),
    (["train", "--domain-id", "999"], "999"),
    (["train", "--config", "missing.yaml"], "missing.yaml"),
    (["train", "--config", "bad_syntax.yaml"], "bad_syntax.yaml"),
    (["train", "--config", "not_a_mapping.yaml"], "not_a_mapping.yaml"),
    (["train", "--set", "learner.num_critic=4"], "num_critic"),
    (["train", "--set", "lerner.utd_ratio=2"], "lerner"),
    (["train", "--set", "learner.utd_ratio=fast"], "utd_ratio"),
    (["train", "--set", "learner.num_critics=99"], "num_critics"),
    (["train", "--set", "novalue"], "novalue"),
    (["train", "--task", "quad_juggle", "--steps", "100"], "--steps"),
    (["train", "--run-dir", "existing_run"], "existing_run"),
    (["train", "--env", "Pendulum-v1", "--set", "sac.num_critic=3"], "num_critic"),
    (["train", "--env", "Pendulum-v1", "--encoder", "no_such_encoder"], "no_such_encoder"),
    (["train", "--env", "Pendulum-v1", "--run-dir", "existing_run"], "existing_run"),
    (["demos", "--task", "arm_lift", "--episodes", "1", "--out", "demos.zarr"], "demos.zarr"),
    (["demos", "--task", "arm_lfit", "--out", "new.zarr"], "arm_lfit"),
    (["demos", "--env", "robot_rl/ArmPickCube-v0", "--goal", "pick", "--out", "episodes.zarr"], "episodes.zarr"),
    (["record", "--task", "arm_pick_cube", "--device", "scripted", "--out", "episodes.zarr"], "episodes.zarr"),
    (["reward", "train", "--demos", "episodes.zarr", "--out", "existing_model"], "existing_model"),
    (["reward", "train", "--demos", "missing.zarr", "--out", "new_model"], "missing.zarr"),
    (["reward", "eval", "--demos", "episodes.zarr", "--model", "no_such_model"], "no_such_model"),
    (["juggle", "train", "--out", "policy_copy", "--iterations", "1"], "policy_copy"),
    (["juggle", "eval", "--policy", "policy_truncated", "--trials", "1"], "policy.safetensors"),
    (["juggle", "eval", "--policy", "policy_bad_card", "--trials", "1"], "card.json"),
    (["juggle", "eval", "--policy", "policy_nan", "--trials", "1"], "NaN"),
    (["juggle", "eval", "--policy", "policy_copy", "--trials", "0"], "--trials"),
    (["juggle", "eval", "--policy", "no_such_policy"], "no_such_policy"),
    (["juggle", "train", "--out", "new_policy", "--hard-fraction", "1.5"], "--hard-fraction"),
    (["juggle", "train", "--out", "new_policy", "--split", "heldot"], "heldot"),
    (["juggle", "train", "--out", "new_policy", "--plant", "restiution=0.7"], "restiution"),
    (["juggle", "eval", "--policy", "policy_copy", "--split", "trian"], "trian"),
    (["juggle", "eval", "--policy", "policy_copy", "--plant", "restitution"], "--plant"),
    (["juggle", "eval", "--policy", "policy_copy", "--trials", "1", "--plant", "restiution=0.7"], "restiution"),
    (["juggle", "eval", "--policy", "policy_copy", "--trials", "1", "--plant", "motor_tau=-0.01"], "motor_tau"),
    (["juggle", "eval", "--policy", "policy_copy", "--trials", "1", "--plant", "quad_start_offset=0,0"],
     "quad_start_offset"),
    (["juggle", "eval", "--policy", "policy_copy", "--trials", "1", "--plant", "action_latency_steps=1.5"],
     "action_latency_steps"),
    (["car", "train", "--out", "existing_model"], "existing_model"),
    (["car", "train", "--out", "new_policy", "--policy", "no_such_policy"], "no_such_policy"),
    (["car", "train", "--out", "new_policy", "--set", "utd_rato=2"], "utd_rato"),
    (["car", "pretrain", "--out", "existing_model"], "existing_model"),
    (["pretrain-encoder", "--out", "existing_encoder"], "existing_encoder"),
    (["pretrain-encoder", "--out", "new_encoder", "--env-kwargs", "[0.15]"], "--env-kwargs"),
    (["pretrain-encoder", "--out", "new_encoder", "--env-kwargs", '{"cube_xy_rnge": 0.15}'], "cube_xy_rnge"),
    (["pretrain-encoder", "--out", "new_encoder", "--env-kwargs", '{"cube_xy_range": 0.5}'], "cube_xy_range"),
    (["report", "no_such_run"], "no_such_run"),
    (["record-bag", "--topics", "/joint_states", "--out", "existing.mcap", "--duration", "1"], "existing.mcap"),
    (["dataset", "verify", "demos_missing_reward.zarr"], "reward"),
    (["dataset", "verify", "not_a_dataset"], "not_a_dataset"),
    (["node", "learner", "--ros-args", "-p", "utd_rato:=2"], "utd_rato"),
    (["node", "learner", "--ros-args", "-p", "num_critics:=99"], "num_critics"),
    (["node", "no_such_node"], "no_such_node"),
    (["node", "arm_actor", "--ros-args", "-p", "policy_file:=no_such.policy"], "no_such.policy"),
    # Issue 78: the eleven that ended in a traceback
    (["train", "--run-dir", "a_file", "--resume"], "a_file"),
    (["train", "--run-dir", "a_file", "--overwrite"], "a_file"),
    (["node", "learner", "--ros-args", "-p", "run_dir:=a_file"], "a_file"),
    (["train", "--run-dir", "readonly/run", "--steps", "1000"], "read-only"),
    (["record-bag", "--topics", "/joint_states", "--out", "readonly/x.mcap", "--duration", "1"], "read-only"),
    (["eval", "--policy", "policy_list_card", "--episodes", "1"], "card.json"),
    (["eval", "--policy", "env_run_truncated", "--episodes", "1"], "env_run_truncated/policy.pt"),
    (["eval", "--policy", "env_run_garbage", "--episodes", "1"], "env_run_garbage/policy.pt"),
    (["eval", "--policy", "env_run", "--episodes", "1", "--env-kwargs", '{"g": "ten"}'], "g takes a number"),
    (["node", "learner", "--ros-args", "--params-file", "nothere.yaml"], "nothere.yaml"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:dumps", "--out", "new.zarr"],
     "dumps() takes 1 positional argument"),
    # Issue 79: what --overwrite and --resume may replace
    (["demos", "--task", "arm_lift", "--episodes", "1", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["dataset", "export", "episodes.zarr", "--format", "lerobot", "--out", "user_folder", "--overwrite"],
     "user_folder"),
    (["car", "train", "--out", "new_policy", "--run-dir", "a_file", "--overwrite"], "a_file"),
    (["car", "train", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["juggle", "train", "--out", "user_folder", "--overwrite", "--iterations", "1"], "user_folder"),
    (["pretrain-encoder", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["reward", "train", "--demos", "episodes.zarr", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["train", "--run-dir", "user_folder", "--overwrite"], "user_folder"),
    (["train", "--env", "Pendulum-v1", "--run-dir", "user_folder", "--overwrite"], "user_folder"),
    (["eval", "--policy", "env_run", "--episodes", "1", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["record-bag", "--topics", "/joint_states", "--out", "user_folder", "--overwrite", "--duration", "1"],
     "user_folder"),
    (["report", "arm_run", "--out", "existing.png"], "existing.png"),
    (["report", "arm_run", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["train", "--task", "quad_juggle", "--resume", "--run-dir", "arm_run"], "juggle_actor"),
    (["train", "--resume", "--run-dir", "arm_run", "--set", "learner.hidden_dims=[32,32]"], "hidden_dims"),
    (["train", "--resume", "--run-dir", "arm_run", "--set", "learner.num_critics=4"], "num_critics"),
    (["train", "--resume", "--run-dir", "env_run"], "params.yaml"),
    (["train", "--resume", "--run-dir", "user_folder"], "params.yaml"),
    (["train", "--resume", "--run-dir", "no_such_run"], "no_such_run"),
    (["train", "--set", "learner.hidden_dims=[-4]"], "hidden_dims"),
    (["train", "--set", "learner.hidden_dims=[64,0]"], "hidden_dims"),
    (["train", "--env", "Pendulum-v1", "--set", "sac.hidden_dims=[0]"], "hidden_dims"),
    (["node", "learner", "--ros-args", "-p", "hidden_dims:=[-3]"], "hidden_dims"),
    (["car", "train", "--out", "new_policy", "--set", "hidden_dims=[0]"], "hidden_dims"),
    # More of a careless user's inputs, command by command
    (["train", "--steps", "0"], "--steps"),
    (["train", "--steps", "1e9x"], "1e9x"),
    (["train", "--eval-episodes", "-1"], "--eval-episodes"),
    (["train", "--seed", "-3"], "--seed"),
    (["train", "--actors", "0"], "actors"),
    (["train", "--actors", "two"], "two"),
    (["train", "--actors", "65"], "actors"),
    (["train", "--backend", "hardware"], "hardware"),
    (["train", "--teleop", "wiimote"], "wiimote"),
    (["train", "--view", "tv"], "tv"),
    (["train", "--view-out", "x.rrd"], "--view-out"),
    (["train", "--status-period", "-1"], "--status-period"),
    (["train", "--teleop-speed", "3"], "--teleop-speed"),
    (["train", "--view-port", "99999"], "99999"),
    (["train", "--nodes", "no_such_node"], "no_such_node"),
    (["train", "--set", "learner.lr=-1"], "lr"),
    (["train", "--set", "learner.utd_ratio=0"], "utd_ratio"),
    (["train", "--set", "learner.batch_size=0"], "batch_size"),
    (["train", "--set", "learner.hidden_dims=wide"], "hidden_dims"),
    (["train", "--set", "arm_sim.clock_mode=warp"], "clock_mode"),
    (["train", "--set", "robot_rl.nodes=[arm_sim, no_such_node]"], "no_such_node"),
    (["train", "--set", "robot_rl.nodes=arm_sim"], "robot_rl.nodes"),
    (["train", "--set", "robot_rl.demos=20"], "robot_rl.demos"),
    (["train", "--set", "robot_rl.demos={episode: 3}"], "episode"),
    (["train", "--set", "robot_rl.actors=0"], "robot_rl.actors"),
    (["train", "--set", "robot_rl.tsak=arm_lift"], "tsak"),
    (["train", "--set", "teleop.speed=2"], "teleop"),
    (["train", "--set", "=3"], "=3"),
    (["train", "--config", "a_file"], "a_file"),
    (["train", "--config", "user_folder"], "user_folder"),
    (["train", "--episode-time-s", "-2"], "--episode-time-s"),
    (["train", "--env", "Pendulum-v1", "--steps", "-1"], "--steps"),
    (["train", "--env", "Pendulum-v1", "--env-kwargs", "{bad json"], "--env-kwargs"),
    (["train", "--env", "Pendulum-v1", "--env-kwargs", "[1]"], "--env-kwargs"),
    (["train", "--env", "Pendulum-v1", "--env-kwargs", '{"gg": 3}'], "gg"),
    (["train", "--env", "Pendulum-v1", "--env-kwargs", '{"g": "ten"}'], "g takes a number"),
    (["train", "--env", "Pendulum-v1", "--demos", "no_such.zarr"], "no_such.zarr"),
    (["train", "--env", "Pendulum-v1", "--demos", "not_a_dataset"], "not_a_dataset"),
    (["train", "--env", "Pendulum-v1", "--set", "sac.num_critics=999"], "num_critics"),
    (["train", "--env", "Pendulum-v1", "--set", "sac.lr=fast"], "lr"),
    (["train", "--env", "Pendulum-v1", "--set", "adapter.normalize_state=maybe"], "normalize_state"),
    (["train", "--env", "Pendulum-v1", "--set", "nosuchgroup.x=1"], "nosuchgroup"),
    (["train", "--env", "Pendulum-v1", "--obs-keys", ","], "--obs-keys"),
    (["train", "--env", "Pendulum-v1", "--resume"], "--resume"),
    (["train", "--env", "Pendulum-v1", "--episode-time-s", "3"], "--episode-time-s"),
    (["train", "--env", "Pendulum-v1", "--control-hz", "-5"], "--control-hz"),
    (["train", "--env", "no_such_module:Env-v0"], "no_such_module"),
    (["train", "--graph"], "--graph"),
    (["train", "--expert", "experts:raises"], "--expert"),
    (["demos", "--task", "arm_lift", "--episodes", "0", "--out", "new.zarr"], "--episodes"),
    (["demos", "--task", "arm_lift", "--episodes", "1", "--noise", "-1", "--out", "new.zarr"], "--noise"),
    (["demos", "--task", "arm_lift", "--episodes", "1", "--out", "demos.zarr", "--append", "--overwrite"],
     "--overwrite"),
    (["demos", "--task", "car_race", "--episodes", "1", "--out", "demos.zarr", "--append"], "car_race"),
    (["demos", "--task", "arm_lift", "--episodes", "1", "--out", "a_file", "--append"], "a_file"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:returns_text", "--out", "new.zarr"],
     "left"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:returns_mapping", "--out",
      "new.zarr"], "torque"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:returns_nan", "--out", "new.zarr"],
     "NaN"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:returns_too_many", "--out",
      "new.zarr"], "5 values"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:raises", "--out", "new.zarr"],
     "the expert's own bug"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:NOT_CALLABLE", "--out", "new.zarr"],
     "NOT_CALLABLE"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts:no_such", "--out", "new.zarr"],
     "no_such"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "no_such_module:x", "--out", "new.zarr"],
     "no_such_module"),
    (["demos", "--env", "Pendulum-v1", "--episodes", "1", "--expert", "experts", "--out", "new.zarr"],
     "module:callable"),
    (["record", "--task", "arm_lift", "--teleop", "wiimote", "--out", "new.zarr"], "wiimote"),
    (["record", "--task", "arm_lfit", "--out", "new.zarr"], "arm_lfit"),
    (["record", "--task", "arm_pick_cube", "--teleop", "scripted", "--episodes", "-1", "--out", "new.zarr"],
     "--episodes"),
    (["record", "--task", "arm_pick_cube", "--teleop", "keyboard", "--out", "new.zarr"], "keyboard"),
    (["record", "--env", "Pendulum-v1", "--expert", "experts:raises", "--episodes", "0", "--out", "new.zarr"],
     "--episodes"),
    (["reward", "train", "--demos", "demos.zarr", "--out", "new_model"], "demos.zarr"),
    (["reward", "train", "--demos", "not_a_dataset", "--out", "new_model"], "not_a_dataset"),
    (["reward", "train", "--demos", "episodes.zarr", "--out", "new_model", "--steps", "0"], "--steps"),
    (["reward", "eval", "--demos", "episodes.zarr", "--model", "user_folder"], "user_folder"),
    (["reward", "eval", "--demos", "episodes.zarr", "--model", "a_file"], "a_file"),
    (["eval", "--policy", "no_such_policy"], "no_such_policy"),
    (["eval", "--policy", "user_folder"], "user_folder"),
    (["eval", "--policy", "policy_truncated", "--episodes", "1"], "policy.safetensors"),
    (["eval", "--policy", "policy_bad_card", "--episodes", "1"], "card.json"),
    (["eval", "--policy", "policy_nan", "--episodes", "1"], "NaN"),
    (["eval", "--policy", "policy_other_task", "--episodes", "1"], "no_such_task"),
    (["eval", "--policy", "policy_copy", "--episodes", "0"], "--episodes"),
    (["eval", "--policy", "policy_copy", "--max-s", "0"], "--max-s"),
    (["eval", "--policy", "policy_copy", "--env", "Pendulum-v1"], "--env"),
    (["eval", "--policy", "env_run", "--env-kwargs", "{nope"], "--env-kwargs"),
    (["eval", "--policy", "env_run", "--episodes", "1", "--env-kwargs", '{"gg": 3}'], "gg"),
    (["eval", "--policy", "env_run", "--episodes", "1", "--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
    (["eval", "--policy", "env_run", "--episodes", "1", "--out", "existing.png"], "existing.png"),
    (["eval", "--policy", "arm_run", "--episodes", "1"], "arm_run"),  # a graph run that published no policy
    (["report", "user_folder"], "user_folder"),
    (["report", "a_file"], "a_file"),
    (["report", "env_run", "--window", "0"], "--window"),
    (["dataset", "verify", "a_file"], "a_file"),
    (["dataset", "verify", "no_such.zarr"], "no_such.zarr"),
    (["dataset", "export", "no_such.zarr", "--format", "lerobot", "--out", "new_export"], "no_such.zarr"),
    (["dataset", "export", "episodes.zarr", "--format", "lerobot", "--out", "new_export", "--fps", "0"], "--fps"),
    (["dataset", "export", "episodes.zarr", "--out", "new_export", "--format", "rlds"], "rlds"),
    (["dataset", "export", "demos_missing_reward.zarr", "--format", "lerobot", "--out", "new_export"],
     "demos_missing_reward.zarr"),
    (["dataset", "import", "user_folder", "--out", "new.zarr"], "user_folder"),
    (["dataset", "import", "not_a_bag.mcap", "--out", "new.zarr", "--task", "arm_pick_cube"], "not_a_bag.mcap"),
    (["record-bag", "--out", "new.mcap"], "--topics"),
    (["record-bag", "--topics", "/joint_states", "--out", "new.mcap", "--duration", "-1"], "--duration"),
    (["record-bag", "--topics", "/joint_states", "--out", "new.mcap", "--compression", "gzip"], "gzip"),
    (["view", "no_such.zarr", "--out", "new.rrd"], "no_such.zarr"),
    (["view", "episodes.zarr", "--out", "new.rrd", "--jpeg-quality", "101"], "--jpeg-quality"),
    (["view", "episodes.zarr", "--out", "new.rrd", "--episodes", "99"], "99"),
    (["view", "episodes.zarr", "--out", "existing.mcap"], "existing.mcap"),
    (["car", "train", "--out", "new_policy", "--steps", "0"], "--steps"),
    (["car", "train", "--out", "new_policy", "--set", "num_critics=0"], "num_critics"),
    (["car", "train", "--out", "new_policy", "--device", "tpu"], "tpu"),
    (["car", "pretrain", "--out", "new_policy", "--tracks", "0"], "--tracks"),
    (["car", "pretrain", "--out", "user_folder", "--overwrite"], "user_folder"),
    (["juggle", "train", "--out", "new_policy", "--num-envs", "0"], "--num-envs"),
    (["juggle", "train", "--out", "new_policy", "--history-steps", "0"], "--history-steps"),
    (["juggle", "train", "--out", "new_policy", "--physics", "bullet"], "bullet"),
    (["juggle", "train", "--out", "new_policy", "--run-dir", "a_file", "--overwrite"], "a_file"),
    (["juggle", "eval", "--policy", "user_folder"], "user_folder"),
    (["juggle", "eval", "--policy", "policy_list_card"], "card.json"),
    (["juggle", "eval", "--policy", "policy_copy", "--max-s", "-1"], "--max-s"),
    (["pretrain-encoder", "--out", "a_file", "--overwrite"], "a_file"),
    (["pretrain-encoder", "--out", "new_encoder", "--env", "Pendulum-v1"], "camera"),
    (["security", "init", "--task", "arm_lfit", "--keystore", "new_keys"], "arm_lfit"),
    (["security", "init", "--task", "arm_lift", "--keystore", "user_folder", "--overwrite"], "user_folder"),
    (["node", "learner", "--ros-args", "--params-file", "bad_syntax.yaml"], "bad_syntax.yaml"),
    (["node", "learner", "--ros-args", "--params-file", "params_list.yaml"], "params_list.yaml"),
    (["node", "learner", "--ros-args", "-p", "task:=arm_lfit"], "arm_lfit"),
    (["node", "learner", "--ros-args", "-p", "demos:=no_such.zarr"], "no_such.zarr"),
    (["node", "learner", "--ros-args", "-p", "batch_size:=many"], "batch_size"),
    (["node", "arm_sim", "--ros-args", "-p", "clock_mode:=warp"], "clock_mode"),
    (["node", "arm_sim", "--ros-args", "-p", "image_size:=-1"], "image_size"),
    (["nosuchcommand"], "nosuchcommand"),
]


FRESH_INTERPRETER = {"train --task arm_lfit", "juggle eval --policy policy_nan --trials 1",
                     "node learner --ros-args -p utd_rato:=2", "dataset verify not_a_dataset",
                     "node learner --ros-args --params-file nothere.yaml"}
NEEDS_READONLY = {" ".join(args) for args, _ in BAD_INPUTS if any(arg.startswith("readonly/") for arg in args)}
"""Cases writing to a read-only file system (the `readonly` fixture: a mount, so root only)."""
"""Cases run by a new interpreter too: its imports must not print a line of their own either."""


@pytest.mark.parametrize("args,fragment", BAD_INPUTS, ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_exit_2_and_changes_nothing(workdir, args, fragment, request):
    if " ".join(args) in NEEDS_READONLY:
        request.getfixturevalue("readonly")
    before = tree_digest(workdir)
    result = robot_rl(args, workdir, fresh=" ".join(args) in FRESH_INTERPRETER)
    after = tree_digest(workdir)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert len(lines) == 1, result.stderr[-3000:]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                             if before.get(k) != after.get(k)}


def test_the_table_covers_enough_inputs():
    assert len(BAD_INPUTS) >= 180
    assert len({" ".join(args) for args, _ in BAD_INPUTS}) == len(BAD_INPUTS), "a row is in the table twice"
    assert FRESH_INTERPRETER <= {" ".join(args) for args, _ in BAD_INPUTS}


def test_ctrl_c_during_demo_generation_keeps_no_partial_dataset(tmp_path):
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_LOCALHOST_ONLY": "1"}
    process = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "demos", "--task", "arm_lift", "--episodes",
                                "500", "--out", "demos.zarr"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               # a shell's background job starts with SIGINT ignored; a user's terminal does not
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(8.0)  # imports done, episodes being simulated
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert [line for line in stderr.splitlines() if line.strip()] == [
        "robot-rl demos: interrupted; outputs being written were not kept"]
    assert list(tmp_path.iterdir()) == []


def _interrupted(args: list[str], cwd: Path, after_s: float) -> subprocess.CompletedProcess:
    """`robot-rl ARGS` in a new interpreter, sent SIGINT (a user's Ctrl-C) `after_s` seconds after it started."""
    process = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", *args], cwd=cwd, env={**os.environ, **LOOPBACK},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                               # a shell's background job starts with SIGINT ignored; a user's terminal does not
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after_s)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=90)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


# (the command replacing the run `run` of the workdir's kind `source`, seconds before Ctrl-C): during the scripted
# demonstrations, and with the graph's nodes running
OVERWRITE_THEN_CTRL_C = [
    (["train", "--steps", "5000", "--run-dir", "run", "--overwrite"], "arm_run", 4.0),
    (["train", "--steps", "5000", "--run-dir", "run", "--overwrite"], "arm_run", 12.0),
    (["train", "--env", "Pendulum-v1", "--steps", "20000", "--run-dir", "run", "--overwrite"], "env_run", 8.0),
]


@pytest.mark.parametrize("args,source,after_s", OVERWRITE_THEN_CTRL_C,
                         ids=[f"{' '.join(a[:2])} after {t:g} s" for a, _, t in OVERWRITE_THEN_CTRL_C])
def test_ctrl_c_during_an_overwrite_leaves_the_old_run_whole(workdir, tmp_path, args, source, after_s):
    shutil.copytree(workdir / source, tmp_path / "run")
    before = tree_digest(tmp_path / "run")
    result = _interrupted(args, tmp_path, after_s)
    assert result.returncode == 130, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert tree_digest(tmp_path / "run") == before
    kept = [p.name for p in tmp_path.iterdir() if p.name != "run"]
    assert all(name.startswith("run-interrupted-") for name in kept), kept  # the new run's files, nothing hidden


def test_a_killed_overwrite_leaves_the_old_run_aside_and_says_where(workdir, tmp_path):
    """SIGKILL can not be caught: the run being replaced stays whole under its hidden name, and the next train of
    that run directory refuses to start until the user has put it back, naming where it is."""
    shutil.copytree(workdir / "arm_run", tmp_path / "run")
    before = tree_digest(tmp_path / "run")
    process = subprocess.Popen([sys.executable, "-m", "robot_rl.cli", "train", "--steps", "5000", "--run-dir", "run",
                                "--overwrite"], cwd=tmp_path, env={**os.environ, **LOOPBACK}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(8.0)
    os.killpg(process.pid, signal.SIGKILL)  # the command and the nodes it started
    process.wait()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".robot_rl-tmp-run-replaced-")]
    assert len(aside) == 1 and tree_digest(aside[0]) == before
    result = robot_rl(["train", "--run-dir", "run", "--overwrite"], tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and aside[0].name in lines[0], result.stderr[-2000:]


def test_debug_shows_the_traceback(tmp_path):
    result = robot_rl(["train", "--task", "arm_lfit", "--debug"], tmp_path)
    assert result.returncode != 0 and "Traceback" in result.stderr and "arm_lfit" in result.stderr


def test_an_interrupted_model_write_keeps_the_previous_model(tmp_path, monkeypatch):
    """A write that fails half way (disk full) leaves the previous model whole and no partial files."""
    import errno

    from robot_rl import artifacts
    from robot_rl.agents.ppo import DeployedPolicy

    shutil.copytree(JUGGLE_POLICY, tmp_path / "policy")
    before = tree_digest(tmp_path)

    def disk_full(card, path, indent=2):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(artifacts, "save_card", disk_full)
    with pytest.raises(OSError, match="no space left") as caught:
        with artifacts.model_directory(tmp_path / "policy") as tmp:
            artifacts.save_weights({}, tmp / "policy.safetensors")
            artifacts.save_card({}, tmp / "card.json")
    assert str(tmp_path / "policy") in str(caught.value)
    assert tree_digest(tmp_path) == before
    assert DeployedPolicy.load(tmp_path / "policy").obs_dim == json.loads(
        (JUGGLE_POLICY / "card.json").read_text())["obs_dim"]


@pytest.fixture
def small_disk(tmp_path):
    """A 400 KiB file system of its own (tmpfs; needs root, as on CI), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_names_the_path_and_keeps_the_previous_dataset(workdir, small_disk):
    shutil.copytree(workdir / "demos.zarr", small_disk / "demos.zarr")
    before = tree_digest(small_disk)
    result = robot_rl(["demos", "--task", "arm_lift", "--episodes", "40", "--out", "disk/demos.zarr", "--overwrite"],
                      small_disk.parent)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and "disk/demos.zarr" in lines[0] and "no space left" in lines[0], lines
    assert tree_digest(small_disk) == before
