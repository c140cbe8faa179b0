"""`robot-rl train`, `record`, `node` and `security init`: the commands that start (or secure) the
task's ROS 2 node graph."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from robot_rl.arguments import (
    at_least,
    command_line,
    dataset_flags,
    dataset_out,
    domain_id_arg,
    in_range,
    parse_settings,
    port_arg,
    recording_path,
    replace_dataset,
)
from robot_rl.cli.env_section import env_section
from robot_rl.cli.gym import cmd_record_env, cmd_train_env
from robot_rl.outputs import UserError, atomic_write_text
from robot_rl.robots import registry
from robot_rl.ros.graph import ACTORS, LEARNERS
from robot_rl.ros.node_kinds import NODE_KINDS
from robot_rl.ros.security import ENFORCEMENT_NOTE, init_keystore
from robot_rl.ros.session import Monitor, check_resumable, claim_run_dir, run_graph
from robot_rl.training.evaluate import fleet_evaluation
from robot_rl.teleop.session_status import KEY_LEGEND
from robot_rl.transport.secret import ensure_run_secret


def _settings(pairs: list[str]) -> dict:
    """The --set NODE.PARAM=VALUE pairs, a deprecated node name (`actor.total_steps`) taken for its new
    one with a deprecation line."""
    from robot_rl.ros.node_kinds import current_name

    out = {}
    for key, value in parse_settings(pairs).items():
        node, dot, param = key.partition(".")
        out[f"{current_name(node, '--set node')}{dot}{param}"] = value
    return out


def _check_keystore(env: dict) -> None:
    """An SROS2 keystore the graph's nodes would use (ROS_SECURITY_KEYSTORE) must have been made for
    the current node names."""
    from robot_rl.ros.security import check_keystore

    if env.get("ROS_SECURITY_KEYSTORE"):
        check_keystore(env["ROS_SECURITY_KEYSTORE"])


def _refuse_settings_outside(nodes: list[str], settings: dict) -> None:
    """A --set for a node the graph does not start would be dropped without a word."""
    for key in settings:
        node = key.partition(".")[0]
        if node != "robot_rl" and node not in nodes:
            raise UserError(f"--set {key}: node {node!r} is not in this graph ({', '.join(nodes)}); "
                            "add it with --set 'robot_rl.nodes=[...]'")


def _flag_settings(args: argparse.Namespace, nodes: list[str]) -> dict:
    """--steps, --eval-episodes, --seed and --episode-time-s as settings of the graph's nodes that declare them."""
    from robot_rl.ros.settings import node_using, run_length_settings

    out = run_length_settings(nodes, args.steps, args.eval_episodes, args.seed,
                              flags={"steps": "--steps", "eval_episodes": "--eval-episodes", "seed": "--seed"})
    if args.episode_time_s is not None:
        node = node_using("episode_time_s", nodes)
        if node is None:
            raise UserError(f"--episode-time-s: no node of this graph ({', '.join(nodes)}) declares episode_time_s")
        out[f"{node}.episode_time_s"] = args.episode_time_s
    return out


def _domain_id(requested: int | None) -> tuple[int, str]:
    """(ROS_DOMAIN_ID, where it came from): --domain-id, else the exported one (so `ros2 topic
    echo` in the user's other shells sees the graph), else a fresh one, which keeps concurrent
    runs (and CI) from seeing each other's topics."""
    if requested is not None:
        return requested, "--domain-id"
    exported = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not exported:
        from robot_rl.ros.graph import unused_domain_id

        return unused_domain_id(), "fresh: none was exported"
    if not exported.isdigit():
        raise UserError(f"ROS_DOMAIN_ID={exported!r} is not a domain id (a number)")
    return int(exported), "exported"


def _discovery_note(backend: str, env: dict) -> str:
    if backend == "sim":
        return "discovery on localhost only (simulation)"
    return f"discovery range {env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', 'SUBNET (default)')}, as configured"


def _join_graph(args: argparse.Namespace) -> tuple[dict, str]:
    """The environment of the graph's nodes (domain id, discovery), set in this process too so the
    monitor and demonstration recording join the same graph; and a line saying how it was chosen."""
    from robot_rl.ros.graph import discovery_environment

    domain_id, domain_source = _domain_id(args.domain_id)
    network = getattr(args, "network", False)
    env = discovery_environment(args.backend, domain_id, network=network)
    for name in set(os.environ) - set(env):  # what the graph's environment dropped (localhost-only settings)
        del os.environ[name]
    os.environ.update(env)
    note = f"discovery range {env['ROS_AUTOMATIC_DISCOVERY_RANGE']} (--network)" if network else \
        _discovery_note(args.backend, env)
    return env, f"ROS_DOMAIN_ID={domain_id} ({domain_source}), {note}"


TELEOP_DEVICES = ("spacemouse", "evdev", "joy", "keyboard")
PERSON_NODES = ("teleop", "scripted_human", "session_view")
"""The nodes a person in the loop adds to a graph (`_person_nodes`)."""

VIEW_CAMERAS = ["front", "wrist"]
"""What the person's view shows of a task without cameras of its own (the simulator renders them
for the view only, at VIEW_IMAGE_SIZE)."""
VIEW_IMAGE_SIZE = 160


def _person_overrides(args: argparse.Namespace, config: dict, robot: list[str]) -> dict:
    """Settings that put a person in the loop with the device `--teleop` names ("scripted": the scripted
    human on a virtual gamepad): the teleop node reading it (the keyboard: this terminal), the simulator
    on the wall clock, the person's timing, and the person's view unless --view off."""
    device = args.teleop
    scripted = device == "scripted"
    actor = next(n for n in config["robot_rl"]["nodes"] if n in ACTORS)  # `robot` lacks it when recording
    overrides = {"teleop.device": "joy" if scripted else device,
                 f"{actor}.reset_time_s": args.reset_time_s, f"{actor}.sync_updates_per_step": 0.0}
    for sim in (n for n in robot if NODE_KINDS[n].role == "simulator"):
        overrides[f"{sim}.clock_mode"] = "realtime"  # a person (scripted too: it reacts in wall time) needs real time
    if _keyboard_here(args):
        if not sys.stdin.isatty():
            raise UserError("--teleop keyboard needs a terminal (or --device-path /dev/pts/N of another one)")
        overrides["teleop.device_path"] = os.ttyname(sys.stdin.fileno())
    elif args.device_path:
        overrides["teleop.device_path"] = args.device_path
    if args.mapping:
        overrides["teleop.mapping"] = args.mapping
    overrides["teleop.speed"] = args.teleop_speed
    return {**overrides, **_view_overrides(args, config, robot, "joy" if scripted else device)}


def _view_overrides(args: argparse.Namespace, config: dict, robot: list[str], device: str) -> dict:
    """Settings of the person's view (`--view`; `device` picks its key legend): MuJoCo's window, the
    session_view node and the cameras it shows."""
    overrides = {}
    view_sim = next((n for n in robot if n in registry.view_simulators()), None)  # renders cameras for the view
    if args.view in ("auto", "window") and view_sim and args.backend == "sim":
        display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
        if args.view == "window" and not display:
            raise UserError("--view window needs a display (DISPLAY is not set); over SSH use --view browser")
        if display:  # MuJoCo's own window where a display exists
            overrides[f"{view_sim}.viewer"] = "always" if args.view == "window" else "auto"
    if args.view != "off":
        from robot_rl.tasks import ENV_TASK, get_task

        task = config["robot_rl"]["task"]
        cameras = [] if task == ENV_TASK else list(get_task(task).cameras)
        if not cameras and view_sim:
            overrides.update({f"{view_sim}.publish_images": True, f"{view_sim}.cameras": VIEW_CAMERAS,
                              f"{view_sim}.image_size": VIEW_IMAGE_SIZE})
            cameras = VIEW_CAMERAS
        if cameras:  # else the view node's own: an environment's, from the run's env task file
            overrides["session_view.cameras"] = cameras
        overrides.update({"session_view.task": config["robot_rl"]["task"], "session_view.device": device,
                          "session_view.port": args.view_port})
    return overrides


def _rerun_view(args: argparse.Namespace, run_dir: Path) -> dict:
    """With --view rerun: where the session_view node logs the session (--view-out; else the Rerun
    viewer where a display exists, else a new <run_dir>/view-<time>.rrd), kept in args.view_out."""
    if args.view != "rerun":
        if args.view_out:
            raise UserError("--view-out is where --view rerun logs the session; add --view rerun")
        return {}
    from robot_rl.view.rerun_log import SPAWN, VIEWER_URL_PREFIXES, check_target, has_display

    target = args.view_out or (SPAWN if has_display() else str(run_dir / f"view-{time.strftime('%Y%m%d-%H%M%S')}.rrd"))
    try:
        check_target(target)
    except ValueError as exc:
        raise UserError(f"--view-out: {exc}") from None
    if target != SPAWN and not target.startswith(VIEWER_URL_PREFIXES):
        path = Path(target).resolve()
        if path.exists():  # not --overwrite: that flag empties a run directory
            raise UserError(f"--view-out {path} already exists; choose another file")
        target = str(path)
    args.view_out = target
    return {"session_view.rerun": target}


def _keyboard_here(args: argparse.Namespace) -> bool:
    """The person types in this terminal (which then runs in raw mode)."""
    return args.teleop == "keyboard" and not args.device_path


def _person_nodes(args: argparse.Namespace, scripted: bool) -> list[str]:
    return ["teleop", *(["scripted_human"] if scripted else []), *(["session_view"] if args.view != "off" else [])]


def _print_view_address(args: argparse.Namespace, actors: int = 1) -> None:
    if args.view != "off":
        print(f"robot_rl: the person's view: http://127.0.0.1:{args.view_port}/ (from another machine: "
              f"ssh -L {args.view_port}:localhost:{args.view_port} <this host>, then the same address there)",
              flush=True)
    if args.view == "rerun":
        target = args.view_out
        if target.endswith(".rrd") and actors > 1:  # build_graph gives each robot its own file
            from robot_rl.ros.graph import robot_file, robot_namespace

            target = robot_file(target, robot_namespace("<i>"))
        watch = f" (watch it with `rerun {target}`)" if target.endswith(".rrd") else ""
        print(f"robot_rl: the session is logged to Rerun: {target}{watch}", flush=True)


def cmd_train(args: argparse.Namespace) -> int:
    if args.graph and not args.env:
        raise UserError("--graph runs a Gymnasium environment (--env ID) through the node graph; give --env")
    if args.expert and not args.graph:
        raise UserError("--expert records demonstrations for --env ID --graph; in one process the environment's "
                        "own expert or --demos is used")
    if args.env and not args.graph:
        if args.episode_time_s is not None:
            raise UserError("--episode-time-s: train --env in one process runs the environment's own episodes; "
                            "add --graph, or use --max-episode-steps with --graph")
        return cmd_train_env(args)
    from robot_rl.ros.graph import (
        apply_overrides,
        build_graph,
        config_path,
        load_config,
        node_names,
    )
    from robot_rl.ros.settings import node_using, warmup_warning

    config = load_config(args.config or config_path("env" if args.env else args.task))
    set_pairs = args.set
    if args.env:
        section, set_pairs = env_section(args)
        config = apply_overrides(config, {"robot_rl.env": section})
    settings = _settings(set_pairs)
    if args.teleop:
        robot = [n for n in config["robot_rl"]["nodes"] if n not in PERSON_NODES]
        person = {"robot_rl.nodes": [*robot, *_person_nodes(args, scripted=False)],
                  **_person_overrides(args, config, robot)}
        config = apply_overrides(config, person)
    elif args.view == "rerun":  # no person in the loop: the view node alone logs the session
        robot = [n for n in config["robot_rl"]["nodes"] if n not in PERSON_NODES]
        config = apply_overrides(config, {"robot_rl.nodes": [*robot, "session_view"],
                                          **_view_overrides(args, config, robot, "keyboard")})
    if args.actors is not None:
        config = apply_overrides(config, {"robot_rl.actors": args.actors})
    config = apply_overrides(config, settings)  # first: `robot_rl.nodes` decides which nodes the flags reach
    nodes = node_names(config, args.backend)
    _refuse_settings_outside(nodes, settings)
    if args.nodes:
        _check_nodes_here(args.nodes, nodes, config["robot_rl"].get("actors", 1))
    config = apply_overrides(config, _flag_settings(args, nodes))
    actor = node_using("total_steps", nodes) or next((n for n in nodes if n in ACTORS), "")  # it steps the task
    warning = warmup_warning(config, nodes)
    if warning:
        print(f"robot_rl: warning: {warning}", file=sys.stderr, flush=True)
    run_dir = Path(args.run_dir or f"runs/{config['robot_rl']['task']}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    config = apply_overrides(config, _rerun_view(args, run_dir))  # a refused --view-out before the run dir changes
    if args.resume and run_dir.is_dir():  # the same task and networks, refused before anything is written
        check_resumable(run_dir, build_graph(config, args.backend, str(run_dir), args.namespace))
    env, graph_line = _join_graph(args)
    _check_keystore(env)
    claim = claim_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)
    try:
        code = _train_in(run_dir, args, config, settings, actor, env, graph_line)
    except BaseException as exc:
        claim.finish(completed=False, code=130 if isinstance(exc, KeyboardInterrupt) else 1)
        raise
    kept = claim.finish(completed=code == 0, code=code)
    if code == 130:
        resume = command_line(args.argv, {"--overwrite": False, "--resume": False, "--run-dir": True},
                              ["--run-dir", str(kept or run_dir), "--resume"])
        print(f"robot_rl: interrupted; carry the run on with: {resume}", flush=True)
    return code


def _train_in(run_dir: Path, args: argparse.Namespace, config: dict, settings: dict, actor: str, env: dict,
              graph_line: str) -> int:
    """`robot-rl train`'s graph run in the claimed `run_dir` (nodes in the environment `env`, joined as
    `graph_line` says): the nodes started, watched and stopped, then the evaluation read and printed; returns
    the command's exit code."""
    from robot_rl.ros.graph import build_graph, params_file, prepare_run, simulated_demos

    ensure_run_secret(run_dir)  # the key the learner checks every transition batch against (kept on resume)
    print(f"robot_rl: task {config['robot_rl']['task']}, backend {args.backend}, run dir {run_dir}, {graph_line}",
          flush=True)
    learner_here = not args.nodes or "learner" in args.nodes  # demonstrations are the learner's
    demo_episodes = simulated_demos(config, args.backend, asked="robot_rl.demos" in settings) if learner_here else 0
    if demo_episodes > 0:
        print("robot_rl: generating scripted demonstrations ...", flush=True)
    config = prepare_run(config, run_dir, demo_episodes)
    specs = build_graph(config, args.backend, str(run_dir), args.namespace)
    if args.nodes:
        specs = _nodes_here(specs, args.nodes)
    params_path = params_file(specs, run_dir / "params.yaml")
    actor_params = next((s.parameters for s in specs if s.name == actor), {})
    eval_path = run_dir / "eval.json"
    for stale in [eval_path, *run_dir.glob("robot*/eval.json")]:
        stale.unlink(missing_ok=True)
    summary_path = run_dir / f"{actor}_summary.json"  # an actor's own result instead (its `headline` first)
    summary_path.unlink(missing_ok=True)

    if args.teleop or args.view == "rerun":
        _print_view_address(args, config["robot_rl"].get("actors", 1))
    monitor = Monitor(int(actor_params.get("total_steps", 0)), int(actor_params.get("eval_episodes", 0)), actor=actor,
                      person=bool(args.teleop), keys=KEY_LEGEND.get(args.teleop, ""))
    keyboard_here = _keyboard_here(args)
    codes, code = run_graph(specs, params_path, run_dir, env, monitor, plain=args.plain or keyboard_here,
                            status_period=args.status_period, redraw=keyboard_here)
    if codes:
        print("robot_rl: exit codes " + ", ".join(f"{n}={c}" for n, c in codes.items()), flush=True)
    fleet = sorted(run_dir.glob("robot*/eval.json"))
    if fleet:
        atomic_write_text(eval_path, json.dumps(fleet_evaluation(fleet), indent=2))
    if eval_path.exists():
        result = json.loads(eval_path.read_text())
        print(f"robot_rl: evaluation success rate {result['success_rate'] * 100:.1f}% over {result['episodes']} "
              f"episodes (policy v{result['policy_version']}, {result['train_steps']} training steps)", flush=True)
        if "laps" in result:
            best = (f", first at step {result['first_lap_step']}, best {result['best_lap_s']:.2f} s"
                    if result["laps"] else "")
            print(f"robot_rl: {len(result['laps'])} clean laps{best}", flush=True)
        print(json.dumps(result), flush=True)
        if not result.get("transitions_acked_all", True):
            code = code or 3
    elif summary_path.exists():
        result = json.loads(summary_path.read_text())
        print(f"robot_rl: {result.pop('headline', 'done')}", flush=True)
        print(json.dumps(result), flush=True)
    elif code == 0:
        code = 1
        print("robot_rl: no evaluation result was produced", file=sys.stderr)
    return code


def _check_nodes_here(wanted: list[str], nodes: list[str], actors: int) -> None:
    """--nodes names nodes of this graph: node names, or a fleet robot's node (robot0/NODE)."""
    from robot_rl.ros.graph import robot_namespace

    robots = {robot_namespace(i) for i in range(actors)} if actors > 1 else set()
    unknown = [name for name in wanted
               if not (name in nodes or (name.partition("/")[0] in robots and name.partition("/")[2] in nodes))]
    if unknown:
        raise UserError(f"--nodes: {', '.join(unknown)} not in this graph ({', '.join(nodes)}"
                        f"{'; robots ' + ', '.join(sorted(robots)) if robots else ''})")


def _nodes_here(specs: list, wanted: list[str]) -> list:
    """The part of the graph this machine runs (--nodes); the others run on other machines joined
    over the network."""
    return [spec for spec in specs if spec.key in wanted or spec.name in wanted]


def cmd_record(args: argparse.Namespace) -> int:
    """A teleop recording session: robot (sim in real time, or the real robot), teleop node, and the
    actor in record mode writing the person's episodes to a zarr dataset (with --env: in one process)."""
    if args.env:
        return cmd_record_env(args)
    if args.expert:
        raise UserError("--expert drives a Gymnasium environment: add --env ID")
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.ros.graph import (
        apply_overrides,
        build_graph,
        config_path,
        load_config,
        node_names,
        params_file,
    )

    config = load_config(args.config or config_path(args.task))
    out = dataset_out(args).resolve()
    # Replacing a dataset: the session records a new one beside it, swapped in when the session ends;
    # otherwise the actor commits episode by episode into --out itself.
    recording = recording_path(args, out)
    scripted = args.teleop == "scripted"
    actor = next((n for n in config["robot_rl"]["nodes"] if n in ACTORS), None)  # records the person's episodes
    if actor is None:
        raise UserError(f"task {config['robot_rl']['task']}'s graph has no actor node to record with")
    robot = [n for n in config["robot_rl"]["nodes"] if n not in (actor, *LEARNERS, *PERSON_NODES)]
    nodes = [*robot, actor, *_person_nodes(args, scripted)]
    overrides = {"robot_rl.nodes": nodes, "robot_rl.demos": {"episodes": 0},
                 f"{actor}.mode": "record", f"{actor}.record_path": str(recording),
                 f"{actor}.record_episodes": args.episodes, f"{actor}.keep_idle": args.keep_idle,
                 f"{actor}.episode_time_s": args.episode_time_s,
                 **_person_overrides(args, config, robot)}
    keyboard_here = _keyboard_here(args)
    if scripted:
        overrides.update({"scripted_human.task": config["robot_rl"]["task"], "scripted_human.takeover_prob_start": 1.0,
                          "scripted_human.takeover_prob_end": 1.0, "scripted_human.off_track_steps": 1,
                          "scripted_human.hold_steps": 1_000, "scripted_human.label_success": True,
                          "teleop.hold_s": 0.05})
    settings = _settings(args.set)
    config = apply_overrides(apply_overrides(config, overrides), settings)  # a refused --set names this run's value
    _refuse_settings_outside(node_names(config, args.backend), settings)
    run_dir = Path(args.run_dir or f"runs/record-{config['robot_rl']['task']}-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    config = apply_overrides(config, _rerun_view(args, run_dir))
    env, graph_line = _join_graph(args)
    _check_keystore(env)
    print(f"robot_rl: recording {config['robot_rl']['task']} with {args.teleop} into {out}, run dir {run_dir}, "
          f"{graph_line}", flush=True)
    _print_view_address(args)
    specs = build_graph(config, args.backend, str(run_dir))
    params_path = params_file(specs, run_dir / "params.yaml")
    (run_dir / "record.json").unlink(missing_ok=True)
    kept_before = len(EpisodeDataset(out)) if args.append and out.exists() else 0
    monitor = Monitor(0, 0, record_episodes=args.episodes, actor=actor, person=True,
                      keys="" if scripted else KEY_LEGEND[args.teleop])
    codes, code = run_graph(specs, params_path, run_dir, env, monitor, plain=args.plain or keyboard_here,
                            status_period=args.status_period, redraw=keyboard_here)
    if recording != out:
        replace_dataset(out, recording)
    summary_path = run_dir / "record.json"
    if summary_path.exists():
        print(json.dumps(json.loads(summary_path.read_text())), flush=True)
    elif out.exists():
        data = EpisodeDataset(out)
        print(json.dumps({"dataset": str(out), "episodes": len(data), "steps": data.num_steps}), flush=True)
    if code == 130:  # the episodes still to record (--episodes 0: as many as the person likes)
        left = args.episodes - (len(EpisodeDataset(out)) - kept_before if out.exists() else 0) if args.episodes else 0
        more = command_line(args.argv, {"--overwrite": False, "--append": False, "--episodes": True},
                            ["--append", "--episodes", str(left)])
        print(f"robot_rl: interrupted; the episodes kept are in {out}"
              + (f"; record more into it with: {more}" if left > 0 or not args.episodes else ""), flush=True)
    if codes.get(actor, 0) not in (0, None):
        code = code or 1
    return code


def cmd_node(args: argparse.Namespace) -> int:
    from robot_rl.ros.node_kinds import NODE_KINDS, current_name

    name = current_name(args.name, "node name")
    if name not in NODE_KINDS:
        raise UserError(f"unknown node {name!r}; known: {', '.join(sorted(NODE_KINDS))}")
    import importlib

    module = importlib.import_module(NODE_KINDS[name].module)
    return module.main([sys.argv[0], *args.rest])


def cmd_security(args: argparse.Namespace) -> int:
    enclaves = init_keystore(args.task, args.keystore, overwrite=args.overwrite, backend=args.backend,
                             namespace=args.namespace)
    print(f"robot-rl security: keystore {args.keystore} with enclaves {', '.join(enclaves)}")
    print(ENFORCEMENT_NOTE.format(keystore=Path(args.keystore).resolve()))
    return 0


def person_flags(parser: argparse.ArgumentParser, reset_time_s: float, episode_time_s: float | None) -> None:
    """The flags of a session with a person in the loop (record, train --teleop)."""
    parser.add_argument("--episode-time-s", type=at_least(0.1, float), default=episode_time_s,
                        help="length of each episode in seconds of the robot's time (a person needs tens; default: "
                             f"{'the task horizon' if episode_time_s is None else episode_time_s})")
    parser.add_argument("--device-path", help="which device (see the teleop node's device_path)")
    parser.add_argument("--mapping", help="teleop mapping file (default: the device's)")
    parser.add_argument("--teleop-speed", type=in_range(0.01, 1.0), default=1.0,
                        help="scale of the person's motion commands, (0, 1]: lower for fine positioning")
    parser.add_argument("--reset-time-s", type=at_least(0.0, float), default=reset_time_s,
                        help="after each reset the robot holds this long, counting down, before the episode runs")
    parser.add_argument("--view", choices=["auto", "browser", "window", "rerun", "off"], default="auto",
                        help="the person's view: the cameras with who drives, the episode clock and the keys, in a "
                             "browser at http://127.0.0.1:PORT/ (over SSH: forward the port); window: also MuJoCo's "
                             "own viewer on the simulated scene; auto: the browser view, and the window where a "
                             "display exists; rerun: the browser view, and the session (cameras, state, actions, "
                             "who drives, reward) logged to Rerun (train without --teleop too)")
    parser.add_argument("--view-out", metavar="FILE.rrd|URL",
                        help="with --view rerun: a new .rrd file, or a Rerun viewer's address "
                             "rerun+http://HOST:9876/proxy (default: the viewer here where a display exists, else "
                             "RUN_DIR/view-<time>.rrd)")
    parser.add_argument("--view-port", type=port_arg, default=8765, help="port of the person's view")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="start the task's node graph (simulator, actor, learner) and train")
    train.add_argument("--task", default=registry.default_task("train"), help="task (config/<task>.yaml)")
    train.add_argument("--env", help="train on this Gymnasium id in one process, without ROS (--set FIELD=VALUE "
                                     "and --set sac.FIELD=VALUE set GymTrainConfig/SACConfig)")
    train.add_argument("--encoder", help="with --env: a pretrained encoder directory, used frozen")
    train.add_argument("--env-kwargs", metavar="JSON", help="with --env: the environment's own options, a JSON object "
                                                              "passed to gymnasium.make")
    train.add_argument("--obs-keys", metavar="KEY,KEY", help="with --env: observation entries to use, in order (a/b for "
                                                              "nested Dict keys); default: every Box entry")
    train.add_argument("--demos", metavar="DATASET", help="with --env: demonstrations, our zarr episodes, a "
                                                           "LeRobotDataset (v3) directory, or a bag (.mcap) of a task "
                                                           "of this environment")
    train.add_argument("--control-hz", type=at_least(0.1, float), default=10.0,
                       help="with --env --teleop: steps per second on the wall clock while a person is in the "
                            "loop; with --env --graph: the environment's control rate")
    train.add_argument("--graph", action="store_true",
                       help="with --env: run the environment as a robot in the ROS 2 node graph (env_sim, env_actor, "
                            "learner; --actors, --teleop, --nodes, --resume apply) instead of in one process")
    train.add_argument("--expert", metavar="MODULE:CALLABLE",
                       help="with --env --graph: a scripted expert whose successful episodes are the demonstrations "
                            "(robot_rl.demos.episodes of them)")
    train.add_argument("--max-episode-steps", type=at_least(1),
                       help="with --env --graph: the episode horizon (default: the environment's registered one)")
    train.add_argument("--config", help="task config YAML (default: config/<task>.yaml of the package)")
    train.add_argument("--backend", default="sim", choices=["sim", "real"])
    train.add_argument("--namespace", default="", help="namespace for every node of the graph")
    train.add_argument("--run-dir", help="where checkpoints, logs and results go (default: runs/<task>-<time>)")
    train.add_argument("--resume", action="store_true", help="carry on an existing run directory (its checkpoint, "
                                                             "journal, step counters and logs)")
    train.add_argument("--overwrite", action="store_true", help="empty an existing run directory and start afresh")
    train.add_argument("--steps", type=at_least(1), help="training environment steps (the actor's total_steps)")
    train.add_argument("--eval-episodes", type=at_least(0), help="evaluation episodes after training")
    train.add_argument("--seed", type=at_least(0))
    train.add_argument("--domain-id", type=domain_id_arg, help="ROS_DOMAIN_ID (default: the exported one, else a random one)")
    train.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                       help="override a node parameter, e.g. --set learner.utd_ratio=2")
    train.add_argument("--plain", action="store_true", help="plain status lines instead of a live display")
    train.add_argument("--status-period", type=at_least(0.1, float), default=10.0, help="seconds between plain status lines")
    train.add_argument("--nodes", nargs="+", metavar="NODE",
                       help="run only these nodes of the graph here (names, or robot0/NODE in a fleet); the "
                            "others run on other machines: see README, 'One graph on several machines'")
    train.add_argument("--network", action="store_true",
                       help="discover and talk to nodes on other machines (the subnet, or your ROS_STATIC_PEERS); "
                            "without it a simulated graph stays on this machine")
    train.add_argument("--actors", type=at_least(1),
                       help="robot+actor pairs feeding the one learner (robot_rl.actors), namespaced robot0..N-1")
    train.add_argument("--teleop", choices=TELEOP_DEVICES,
                       help="a person in the loop: add the teleop node reading this device (keyboard: this terminal) "
                            "and the person's view; the simulator then runs on the wall clock")
    person_flags(train, reset_time_s=0.0, episode_time_s=None)
    train.set_defaults(handler=cmd_train)
    node = sub.add_parser("node", help="run one node of the package (ROS arguments follow)")
    node.add_argument("name")
    node.set_defaults(handler=cmd_node)
    rec = sub.add_parser("record", help="teleop recording session: a person drives, episodes go to a zarr dataset")
    rec.add_argument("--task", default=registry.default_task("record"),
                     help="task (its config/<task>.yaml gives the robot and cameras)")
    rec.add_argument("--config", help="task config YAML instead of the package's")
    rec.add_argument("--out", required=True, help="zarr episode dataset")
    rec.add_argument("--env", help="record from this Gymnasium id in one process, without ROS (keyboard, spacemouse "
                                   "or evdev; --set adapter.FIELD=VALUE declares its conventions)")
    rec.add_argument("--env-kwargs", metavar="JSON", help="with --env: the environment's own options (JSON object)")
    rec.add_argument("--obs-keys", metavar="KEY,KEY", help="with --env: observation entries to record, in order")
    rec.add_argument("--control-hz", type=at_least(0.1, float), default=10.0,
                     help="with --env: steps per second of the person's time")
    rec.add_argument("--seed", type=at_least(0), default=0, help="with --env: reset seed of the first episode")
    rec.add_argument("--expert", metavar="MODULE:CALLABLE",
                     help="with --env: a scripted expert drives instead of a person, as fast as the environment "
                          "steps (called expert(observation, info) -> the environment's action; a class is "
                          "instantiated; see robot_rl/training/experts.py)")
    rec.add_argument("--noise", type=at_least(0.0, float), default=0.0,
                     help="with --expert: Gaussian noise (standard deviation, in the agent's [-1, 1]) on its actions")
    rec.add_argument("--keep-failures", action="store_true",
                     help="with --expert: keep every attempt (by default only successful episodes are kept)")
    dataset_flags(rec)
    rec.add_argument("--episodes", type=at_least(0), default=20, help="episodes to keep (0: until Ctrl-C)")
    rec.add_argument("--teleop", "--device", dest="teleop", default="spacemouse",
                     choices=[*TELEOP_DEVICES, "scripted"],
                     help="input device (--device is the same flag); scripted: the scripted human on a virtual "
                          "gamepad (tests, demos)")
    rec.add_argument("--keep-idle", action="store_true",
                     help="keep episodes nobody drove (by default they are discarded, counted and the reason shown)")
    person_flags(rec, reset_time_s=3.0, episode_time_s=30.0)
    rec.add_argument("--backend", default="sim", choices=["sim", "real"])
    rec.add_argument("--run-dir", help="logs and record.json (default: runs/record-<task>-<time>)")
    rec.add_argument("--domain-id", type=domain_id_arg, help="ROS_DOMAIN_ID (default: the exported one, else a random one)")
    rec.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE", help="override a node parameter")
    rec.add_argument("--plain", action="store_true", help="plain status lines instead of a live display")
    rec.add_argument("--status-period", type=at_least(0.1, float), default=5.0, help="seconds between plain status lines")
    rec.set_defaults(handler=cmd_record)
    security = sub.add_parser("security", help="SROS2 keystore with least-privilege enclaves for a task's graph")
    security_sub = security.add_subparsers(dest="action", required=True)
    sinit = security_sub.add_parser("init", help="write a CA and one enclave per node (permissions from the graph)")
    sinit.add_argument("--task", default=registry.default_task("init"))
    sinit.add_argument("--keystore", default="keystore", help="output directory")
    sinit.add_argument("--backend", default="sim", choices=["sim", "real"])
    sinit.add_argument("--namespace", default="", help="namespace of the graph's nodes")
    sinit.add_argument("--overwrite", action="store_true", help="replace an existing keystore")
    security.set_defaults(handler=cmd_security)
