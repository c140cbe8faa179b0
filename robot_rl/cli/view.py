"""`robot-rl view <dataset or run>`: replay recorded episodes, or a run's learning curve and datasets,
in Rerun (robot_rl.view.rerun_replay)."""

from __future__ import annotations

import argparse

from robot_rl.arguments import at_least, overwrite_flag
from robot_rl.outputs import UserError


def cmd_view(args: argparse.Namespace) -> int:
    from robot_rl.data.lerobot_format import open_episodes
    from robot_rl.view.rerun_log import SPAWN, RerunConfig, RerunSession, has_display
    from robot_rl.view.rerun_replay import camera_names, chosen_episodes, log_run, parse_episodes, replay, view_sources

    if args.out is None and not has_display():
        raise UserError("no display here for the Rerun viewer: pass --out FILE.rrd and open it where there is one "
                        "with `rerun FILE.rrd`")
    if args.jpeg_quality > 100:
        raise UserError(f"--jpeg-quality is 0 (raw) to 100, got {args.jpeg_quality}")
    run, paths = view_sources(args.path)
    episodes = parse_episodes(args.episodes)
    datasets = [open_episodes(path) for path in paths]
    for dataset in datasets:  # every choice checked before anything is written
        chosen_episodes(dataset, episodes)
    config = RerunConfig(args.out or SPAWN, cameras=camera_names(datasets), jpeg_quality=args.jpeg_quality,
                         overwrite=args.overwrite, recording_name=args.path)
    with RerunSession(config) as session:
        rows = log_run(session, run) if run is not None else 0
        steps = replay(session, datasets, episodes)
    shown = [f"{rows} learning-curve rows"] if run is not None else []
    shown.append(f"{steps} observations of {len(datasets)} dataset(s)")
    print(f"robot-rl view: {', '.join(shown)} {'to ' + str(session.path) if session.path else 'sent to the viewer'}",
          flush=True)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    view = sub.add_parser("view", help="replay an episode dataset, or a run's learning curve and datasets, in Rerun")
    view.add_argument("path", help="an episode dataset (zarr, or a LeRobotDataset v3 directory) or a run directory "
                                   "(robot-rl train, train --env)")
    view.add_argument("--out", help="write the recording to this .rrd file (open it with `rerun FILE.rrd`), or send "
                                    "it to a running viewer, rerun+http://HOST:9876/proxy; default: start the "
                                    "viewer here (needs a display)")
    view.add_argument("--episodes", metavar="I,J,...", help="only these episodes of each dataset (negative: from the "
                                                            "end); default: all")
    view.add_argument("--jpeg-quality", type=at_least(0), default=0,
                      help="store camera frames as JPEG of this quality (1-100; files several times "
                           "smaller); 0: raw, the exact pixels")
    overwrite_flag(view, "an existing --out file")
    view.set_defaults(handler=cmd_view)
