"""ament_python package setup: `colcon build` on a ROS 2 install, `pip install -e .` without one."""

from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "robot_rl"
NODES = sorted(path.stem for path in Path(PACKAGE, "nodes").glob("*.py") if path.stem != "__init__")
"""One console script per node module (`ros2 run robot_rl <node>`): a robot's nodes need no edit here."""
DEPRECATED_NODES = ["sim", "actor"]  # robot_rl/ros/node_kinds.py: DEPRECATED_NODE_NAMES


def share_tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries that install `folder/` recursively under share/robot_rl/."""
    entries = {}
    for path in Path(folder).rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            entries.setdefault(str(Path("share", PACKAGE, path.parent)), []).append(str(path))
    return sorted(entries.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["tests", "tests.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        *share_tree("config"),
        *share_tree("sim"),
        *share_tree("hardware"),
        *share_tree("policies"),
    ],
    install_requires=["setuptools", "numpy", "scipy", "pyyaml", "safetensors", "zarr", "mujoco", "gymnasium", "rich",
                      "pillow",  # the session view: frames composed and JPEG-encoded
                      "cryptography",  # robot-rl security: SROS2 keystores
                      "tensorboard"],
    zip_safe=True,
    maintainer="robot_rl developers",
    maintainer_email="robot-rl@example.org",
    description="Reinforcement learning on real robots over ROS 2: SERL/HIL-SERL, JuggleRL, FastRLAP, VLAC rewards.",
    license="Apache-2.0",
    extras_require={
        # real devices: RealSense and V4L2/OpenCV cameras, MCAP recording
        "hardware": ["pyrealsense2", "opencv-python-headless", "mcap", "mcap-ros2-support", "pymavlink", "cflib",
                     "pyserial"],
        # teleop input devices: SpaceMouse (HID) and Linux gamepads (evdev; prebuilt wheel)
        "teleop": ["hidapi", "evdev-binary"],
        # the juggling vector env on a GPU: MuJoCo MJX on JAX (the whole env on the device) or MuJoCo Warp (the
        # physics only); the CPU modes of both run in the tests. On a GPU install JAX's CUDA build beside it.
        "gpu": ["mujoco-warp>=4.0", "mujoco-mjx==3.17.0", "jax==0.10.2", "jaxlib==0.10.2"],
        # the vision-language reward backends (vlac: InternVL checkpoints, native or VLAC's remote code, which also
        # imports einops, timm and sentencepiece; vlm_critic, vlm_episode_score: Qwen-VL), from a local path
        "vlac": ["transformers>=5.23,<6", "einops", "sentencepiece", "timm"],
        # peer libraries benchmarks/learner_throughput.py measures beside ours (pinned: the versions measured;
        # install torch==2.13.0 first, as `make setup` does, so none of them pulls another torch)
        "bench": ["stable-baselines3==2.9.2", "torchrl==0.14.1", "rsl-rl-lib==5.5.1", "sbx-rl==0.28.0",
                  "jax==0.10.2", "jaxlib==0.10.2"],
        # LeRobotDataset v3 import/export (lerobot itself does not install beside torch 2.13; av 19 needs Python 3.12)
        "lerobot": ["pyarrow==26.0.1", "av==18.1.0"],
        # established suites that install beside our pins and train through `robot-rl train --env` (README: which
        # others downgrade MuJoCo or numpy or clash with OpenCV)
        "suites": ["gymnasium-robotics==1.4.2"],
        # HIL-SERL's Panda scenes (gym_hil/PandaPickCube-v0 ...); it pins MuJoCo below 3.9, which the test extra's
        # mujoco-warp contradicts, so it lives in a venv of its own: `make gym-hil-env`, `make test-gym-hil`
        "gym-hil": ["gym-hil==0.1.14"],
        # the Rerun view of sessions and recordings (--view rerun, robot-rl view); its viewer is ~500 MB
        "view": ["rerun-sdk==0.41.0"],
        # the tests drive the hardware adapters through their real libraries
        "test": ["pytest", "pytest-timeout", "pytest-xdist", "matplotlib", "hypothesis", "pyrealsense2", "opencv-python-headless",
                 "mcap", "mcap-ros2-support", "pymavlink", "cflib", "hidapi", "evdev-binary", "pyserial",
                 "mujoco-warp>=4.0", "mujoco-mjx==3.17.0", "jax==0.10.2", "jaxlib==0.10.2", "pyarrow==26.0.1",
                 "av==18.1.0", "rerun-sdk==0.41.0",
                 "gymnasium-robotics==1.4.2", "transformers==5.23.0"],
    },
    entry_points={
        "console_scripts": [
            "robot-rl = robot_rl.cli:main",
            *[f"{node} = robot_rl.nodes.{node}:main" for node in NODES],
            # the names before 0.1.x's robot-explicit ones: warn, then run the new node (removed in 0.2.0)
            *[f"{old} = robot_rl.ros.node_kinds:{old}_main" for old in DEPRECATED_NODES],
        ],
    },
)
