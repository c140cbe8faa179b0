"""`robot-rl demos`, `dataset verify|export|import`, `record-bag` and `report`: datasets, bags and run reports."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from robot_rl.arguments import at_least, dataset_flags, dataset_out, overwrite_flag, parse_settings
from robot_rl.cli.gym import checked_env_id, cmd_record_expert
from robot_rl.outputs import UserError, atomic_path, check_output
from robot_rl.robots import registry

DEFAULT_IMAGE_SIZE = 128
"""Camera frame size of `demos --env` with a built-in expert."""


def cmd_demos(args: argparse.Namespace) -> int:
    dataset_out(args)  # refused before the episodes are collected
    if args.env and args.expert:
        return _demos_from_expert(args)
    expert_only = [flag for flag, given in (("--expert", args.expert), ("--set", args.set),
                                            ("--env-kwargs", args.env_kwargs), ("--obs-keys", args.obs_keys),
                                            ("--keep-failures", args.keep_failures)) if given]
    if expert_only:
        raise UserError(f"{', '.join(expert_only)}: for --env ID --expert MODULE:CALLABLE")
    if args.env:
        return _demos_episodes(args)
    from robot_rl.data.dataset import save_transitions
    from robot_rl.tasks import get_task

    task = get_task(args.task)
    arrays, info = registry.scripted_demos(task.name)({}, task, args.episodes, args.seed, args.noise)
    save_transitions(args.out, arrays, {"task": task.name, "source": "scripted_expert", **info},
                     overwrite=args.overwrite, append=args.append)
    print(f"wrote {len(arrays['reward'])} transitions from {info['episodes']} episodes to {args.out}")
    return 0


def _demos_from_expert(args: argparse.Namespace) -> int:
    """`demos --env ID --expert module:callable`: the expert's episodes as `record --env --expert` records them."""
    built_in_only = [flag for flag, given in (("--random", args.random), ("--goal", args.goal),
                                              ("--image-size", args.image_size is not None)) if given]
    if built_in_only:
        raise UserError(f"{', '.join(built_in_only)}: for the built-in experts (with --expert the cameras' size is "
                        "--set adapter.image_size=N)")
    return cmd_record_expert(args)


def _demos_episodes(args: argparse.Namespace) -> int:
    from robot_rl.data.scripted import random_actions, record_scripted_episodes
    from robot_rl.tasks import expert_for_env

    checked_env_id(args.env)
    if args.random:
        import gymnasium as gym

        import robot_rl.envs  # noqa: F401 - registers the environments

        probe = gym.make(args.env)
        expert = random_actions(probe.action_space.shape[0])
        probe.close()
    else:
        expert = expert_for_env(args.env)
    if expert is None:
        print(f"robot-rl demos: {args.env} has no built-in scripted expert; give yours with --expert "
              "MODULE:CALLABLE", file=sys.stderr)
        return 2
    if not args.goal:
        print("robot-rl demos --env: give the task's goal sentence with --goal", file=sys.stderr)
        return 2
    env_kwargs = {"image_size": args.image_size or DEFAULT_IMAGE_SIZE, "randomization_split": args.split}
    # Appended in place (episode by episode, as the writer commits them); otherwise built beside --out and
    # renamed into place when complete, so a failed run leaves no partial or half-replaced dataset.
    with contextlib.nullcontext(args.out) if args.append else atomic_path(args.out, directory=True) as target:
        stats = record_scripted_episodes(str(target), args.env, expert, args.episodes, goal=args.goal,
                                         seed=args.seed, noise=args.noise, env_kwargs=env_kwargs,
                                         successful_only=not args.random)
    print(f"wrote {stats['episodes']} episodes ({stats['steps']} steps, {stats['attempts']} attempts) to {args.out}")
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    if args.action == "export":
        return _export(args)
    if args.action == "import":
        return _import(args)
    from robot_rl.data.verify import verify_dataset

    print(verify_dataset(args.path).summary())
    return 0


def camera_names_arg(text: str) -> dict[str, str]:
    """--camera-names OURS=LEROBOT[,OURS=LEROBOT...]: cameras renamed on export (checked against the dataset there)."""
    names: dict[str, str] = {}
    for pair in text.split(","):
        ours, sep, theirs = (part.strip() for part in pair.partition("="))
        if not (sep and ours and theirs):
            raise argparse.ArgumentTypeError(f"expected OURS=LEROBOT pairs separated by commas (pixels_front=front), "
                                             f"got {pair!r}")
        if ours in names:
            raise argparse.ArgumentTypeError(f"camera {ours!r} is named twice")
        names[ours] = theirs
    return names


def _export(args: argparse.Namespace) -> int:
    from robot_rl.data.lerobot_export import VideoSettings, export_lerobot

    check_output(args.out, "LeRobot dataset", overwrite=args.overwrite)
    chosen = {"codec": args.codec, "pix_fmt": args.pix_fmt, "crf": args.crf}
    video = VideoSettings(**{name: value for name, value in chosen.items() if value is not None})
    # Built beside --out and renamed into place when complete: a failure leaves no partial dataset behind.
    with atomic_path(args.out, directory=True) as target:
        summary = export_lerobot(args.dataset, target, fps=args.fps, task=args.task, video=video,
                                 camera_names=args.camera_names)
    print(f"wrote {summary.episodes} episodes ({summary.frames} frames at {summary.fps} fps ({summary.fps_from}), "
          f"{video.codec} {video.pix_fmt} crf {video.crf}) to {args.out} as a LeRobotDataset v3")
    return 0


def _import(args: argparse.Namespace) -> int:
    """The format is chosen by the source: an .mcap file is a bag of a task's topics, else a LeRobot dataset."""
    from robot_rl.ros.bag_import import import_bag, is_bag
    from robot_rl.data.lerobot_format import import_lerobot

    bag = is_bag(args.src)
    bag_only = [flag for flag, given in (("--task", args.task), ("--namespace", args.namespace), ("--set", args.set))
                if given]
    if bag_only and not bag:
        raise UserError(f"{', '.join(bag_only)}: for a bag (.mcap)")
    task = None
    if args.task:
        from robot_rl.tasks import get_task

        try:
            task = get_task(args.task)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    check_output(args.out, "dataset", overwrite=args.overwrite)
    with atomic_path(args.out, directory=True) as target:
        if bag:
            dataset = import_bag(args.src, target, task=task, settings=parse_settings(args.set),
                                 namespace=args.namespace or "",
                                 warn=lambda line: print(f"robot-rl dataset import: warning: {line}", file=sys.stderr))
        else:
            dataset = import_lerobot(args.src, target)
        episodes, steps = len(dataset), dataset.num_steps
    print(f"wrote {episodes} episodes ({steps} steps) from {args.src} to {args.out}")
    return 0


def cmd_record_bag(args: argparse.Namespace) -> int:
    from robot_rl.ros.bag import record

    check_output(args.out, "bag file", overwrite=args.overwrite)
    summary = record(args.topics, args.out, duration=args.duration, compression=args.compression,
                     overwrite=args.overwrite)
    print(f"record-bag: wrote {summary.messages} messages from {len(summary.topics)} topic(s) to {summary.path} "
          f"in {summary.duration_s:.1f} s", flush=True)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from robot_rl.training.report import load_run, write_report

    rows = load_run(args.run)
    out = check_output(args.out or Path(args.run) / "report.png", "report", overwrite=args.overwrite)
    out = write_report(rows, out, window=args.window, title=args.title or Path(args.run).resolve().name)
    print(f"wrote {out} ({len(rows)} episodes)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    demos = sub.add_parser("demos", help="record scripted demonstrations to a zarr dataset")
    demos.add_argument("--task", default=registry.default_task("demos"), help="task whose scripted expert records")
    demos.add_argument("--episodes", type=at_least(1), default=20)
    demos.add_argument("--noise", type=at_least(0.0, float), default=0.1)
    demos.add_argument("--seed", type=at_least(0), default=0)
    demos.add_argument("--out", required=True)
    dataset_flags(demos)
    demos.add_argument("--env", help="a camera Gymnasium task with a built-in scripted expert (e.g. "
                                     "robot_rl/ArmPickCube-v0): write an episode dataset with frames, success labels "
                                     "and --goal; any Gymnasium id with --expert")
    demos.add_argument("--goal", help="with --env: the task's goal sentence, stored in the dataset")
    demos.add_argument("--image-size", type=at_least(8),
                       help=f"with --env: camera frame size (default {DEFAULT_IMAGE_SIZE})")
    demos.add_argument("--split", default="train", help="with --env: randomization split")
    demos.add_argument("--random", action="store_true", help="with --env: uniformly random actions instead of the "
                                                             "expert, every episode kept (failures: negatives for a "
                                                             "reward model)")
    demos.add_argument("--expert", metavar="MODULE:CALLABLE",
                       help="with --env: your scripted expert for any Gymnasium environment, called "
                            "expert(observation, info) -> the environment's action (a class is instantiated; see "
                            "robot_rl/training/experts.py); recorded as `robot-rl record --env --expert` records")
    demos.add_argument("--env-kwargs", metavar="JSON",
                       help="with --expert: the environment's own options (JSON object)")
    demos.add_argument("--obs-keys", metavar="KEY,KEY", help="with --expert: observation entries to record, in order")
    demos.add_argument("--set", action="append", default=[], metavar="adapter.FIELD=VALUE",
                       help="with --expert: declare the environment's conventions "
                            "(robot_rl.envs.adapter.AdapterConfig)")
    demos.add_argument("--keep-failures", action="store_true",
                       help="with --expert: keep every attempt (by default only successful episodes are kept)")
    demos.set_defaults(handler=cmd_demos)
    rep = sub.add_parser("report", help="PNG of success and intervention rate over a run")
    rep.add_argument("run", help="run directory (episodes.jsonl of robot-rl train, or history.json of train --env)")
    rep.add_argument("--out", help="output PNG (default: <run>/report.png)")
    rep.add_argument("--window", type=at_least(1), default=20, help="episodes per moving average")
    rep.add_argument("--title")
    overwrite_flag(rep, "an existing report PNG")
    rep.set_defaults(handler=cmd_report)
    dataset = sub.add_parser("dataset", help="check a zarr dataset, or export/import LeRobot datasets")
    dataset_sub = dataset.add_subparsers(dest="action", required=True)
    verify = dataset_sub.add_parser("verify", help="check that every chunk of every array is there and its checksum "
                                                   "matches (exit 2 naming the first damaged one)")
    verify.add_argument("path", help="zarr dataset (robot-rl demos, record)")
    export = dataset_sub.add_parser("export", help="write an episode dataset (ours or LeRobot) as a LeRobotDataset "
                                                   "v3 directory (parquet + MP4)")
    export.add_argument("dataset", help="zarr episode dataset (robot-rl demos --env, record) or LeRobot v3 directory")
    export.add_argument("--format", required=True, choices=["lerobot"], help="output format")
    export.add_argument("--out", required=True, help="output directory")
    export.add_argument("--fps", type=at_least(1), help="frames per second (default: the rate the dataset was "
                                                         "recorded at, else its steps' stamps where evenly paced)")
    export.add_argument("--task", help="task sentence of every episode (default: the dataset's goal)")
    export.add_argument("--camera-names", type=camera_names_arg, metavar="OURS=LEROBOT,...",
                        help="rename cameras, e.g. pixels_front=front,pixels_wrist=wrist for LeRobot's HIL-SERL "
                             "(observation.images.front, .wrist)")
    export.add_argument("--codec", help="video encoder: h264 (default), hevc or libsvtav1 (AV1, needs --pix-fmt "
                                        "yuv420p)")
    export.add_argument("--pix-fmt", help="video pixel format (default yuv444p: 4:2:0 loses colour edges)")
    export.add_argument("--crf", type=at_least(0), help="video quality (default 0: lossless with h264); larger is "
                                                         "smaller and lossier")
    overwrite_flag(export, "an existing output directory")
    imp = dataset_sub.add_parser("import", help="write a LeRobotDataset v3 directory, or a bag (.mcap) of a task's "
                                                 "topics, as a zarr episode dataset")
    imp.add_argument("src", help="LeRobotDataset v3 directory (with meta/info.json), or an MCAP bag (.mcap: ros2 bag "
                                 "record, robot-rl record-bag) of a task's cameras, state and command topics, and "
                                 "the actor's episode/step for who drove, labels and episode ends")
    imp.add_argument("--out", required=True, help="output zarr dataset")
    imp.add_argument("--task", help="with a bag: the task expected (default: the one the actor's step log names)")
    imp.add_argument("--namespace", help="with a bag: the robot's namespace in a fleet (robot0, ...)")
    imp.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                     help="with a bag: a parameter the actor ran with where not its default (the one its "
                          "commands scale by, for one), as the session's --set gave it")
    overwrite_flag(imp, "an existing dataset")
    dataset.set_defaults(handler=cmd_dataset)
    bag = sub.add_parser("record-bag", help="record topics to an MCAP file (ROS 2 profile) until Ctrl-C or "
                                            "--duration")
    bag.add_argument("--topics", nargs="+", required=True, metavar="TOPIC", help="topics to record (any types)")
    bag.add_argument("--out", required=True, help="output .mcap file")
    bag.add_argument("--duration", type=at_least(0.001, float), help="seconds to record (default: until Ctrl-C)")
    bag.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "none"], help="MCAP chunk compression")
    overwrite_flag(bag, "the bag file")
    bag.set_defaults(handler=cmd_record_bag)
