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
    return root


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
]


FRESH_INTERPRETER = {"train --task arm_lfit", "juggle eval --policy policy_nan --trials 1",
                     "node learner --ros-args -p utd_rato:=2", "dataset verify not_a_dataset"}
"""Cases run by a new interpreter too: its imports must not print a line of their own either."""


@pytest.mark.parametrize("args,fragment", BAD_INPUTS, ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_exit_2_and_changes_nothing(workdir, args, fragment):
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
    assert len(BAD_INPUTS) >= 30
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
