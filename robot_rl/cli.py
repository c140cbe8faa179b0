"""The `robot-rl` command.

  robot-rl train [--task arm_lift] [--steps N] ...   start the task's node graph and train
  robot-rl train --env <gymnasium id> [--encoder DIR]  SAC/RLPD on any Gymnasium env, no ROS
  robot-rl pretrain-encoder --out DIR                 pretrain the shipped arm vision encoder
  robot-rl node NAME [--ros-args ...]                run one node (what `ros2 run` would)
  robot-rl demos --task arm_lift --episodes 20 --out demos.zarr
  robot-rl demos --env robot_rl/ArmPickCube-v0 --goal "pick up the cube" --out pick.zarr
  robot-rl record --task arm_pick_cube --device spacemouse --episodes 20 --out demos.zarr
  robot-rl dataset verify demos.zarr                 check every chunk of a dataset (exists, checksum)
  robot-rl report RUN_DIR                            success and intervention rate over a run (PNG)
  robot-rl reward train --demos DATASET... --out DIR  train the local progress reward model
  robot-rl reward eval --demos DATASET... --model DIR  VOC, negative share, wrong goal, done F1
  robot-rl juggle train --out policies/quad_juggle   PPO quadrotor juggling in the randomized vector sim
  robot-rl juggle eval --policy policies/quad_juggle  long juggling trials (hits per trial)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path

import yaml

from robot_rl.outputs import TEMP_PREFIX, UserError, atomic_path, check_output
from robot_rl.ros.security import ENFORCEMENT_NOTE, ensure_run_secret, init_keystore
from robot_rl.ros.session import Monitor, check_resumable, claim_run_dir, run_graph


def _parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--set expects node.param=value, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def _refuse_settings_outside(nodes: list[str], settings: dict) -> None:
    """A --set for a node the graph does not start would be dropped without a word."""
    for key in settings:
        node = key.partition(".")[0]
        if node != "robot_rl" and node not in nodes:
            raise UserError(f"--set {key}: node {node!r} is not in this graph ({', '.join(nodes)}); "
                            "add it with --set 'robot_rl.nodes=[...]'")


def _flag_settings(args: argparse.Namespace, nodes: list[str]) -> dict:
    """--steps, --eval-episodes and --seed as settings of the graph's nodes that declare them; a
    flag no node of the graph uses is refused rather than dropped."""
    from robot_rl.ros.settings import declared_params, node_using

    out = {}
    for flag, param, value in (("--steps", "total_steps", args.steps),
                               ("--eval-episodes", "eval_episodes", args.eval_episodes)):
        if value is not None:
            node = node_using(param, nodes)
            if node is None:
                raise UserError(f"{flag}: no node of this graph ({', '.join(nodes)}) declares {param}")
            out[f"{node}.{param}"] = value
    if args.seed is not None:
        seeded = [n for n in nodes if "seed" in declared_params(n)]
        if not seeded:
            raise UserError(f"--seed: no node of this graph ({', '.join(nodes)}) declares seed")
        out.update({f"{n}.seed": args.seed for n in seeded})
    return out


def _domain_id(requested: int | None) -> tuple[int, str]:
    """(ROS_DOMAIN_ID, where it came from): --domain-id, else the exported one (so `ros2 topic
    echo` in the user's other shells sees the graph), else a fresh one, which keeps concurrent
    runs (and CI) from seeing each other's topics."""
    if requested is not None:
        return requested, "--domain-id"
    exported = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not exported:
        return random.SystemRandom().randint(1, 101), "fresh: none was exported"
    if not exported.isdigit():
        raise UserError(f"ROS_DOMAIN_ID={exported!r} is not a domain id (a number)")
    return int(exported), "exported"


def _discovery_note(backend: str, env: dict) -> str:
    if backend == "sim":
        return "discovery on localhost only (simulation)"
    return f"discovery range {env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', 'SUBNET (default)')}, as configured"


def cmd_train(args: argparse.Namespace) -> int:
    from robot_rl.ros.graph import (apply_overrides, build_graph, config_path, discovery_environment, load_config,
                                    node_names, params_file, prepare_run, simulated_demos)
    from robot_rl.ros.settings import node_using, warmup_warning

    config = load_config(args.config or config_path(args.task))
    settings = _parse_overrides(args.set)
    config = apply_overrides(config, settings)  # first: `robot_rl.nodes` decides which nodes the flags reach
    nodes = node_names(config, args.backend)
    _refuse_settings_outside(nodes, settings)
    config = apply_overrides(config, _flag_settings(args, nodes))
    actor = node_using("total_steps", nodes) or "actor"  # the node that steps the task: the arm's actor, or the car's
    warning = warmup_warning(config, nodes)
    if warning:
        print(f"robot_rl: warning: {warning}", file=sys.stderr, flush=True)
    run_dir = Path(args.run_dir or f"runs/{config['robot_rl']['task']}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    claim_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)
    ensure_run_secret(run_dir)  # the key the learner checks every transition batch against (kept on resume)
    domain_id, domain_source = _domain_id(args.domain_id)
    env = discovery_environment(args.backend, domain_id)
    os.environ.update(env)  # the monitor and demonstration recording join the same graph
    print(f"robot_rl: task {config['robot_rl']['task']}, backend {args.backend}, run dir {run_dir}, "
          f"ROS_DOMAIN_ID={domain_id} ({domain_source}), {_discovery_note(args.backend, env)}", flush=True)
    demo_episodes = simulated_demos(config, args.backend, asked="robot_rl.demos" in settings)
    if demo_episodes > 0:
        print("robot_rl: generating scripted demonstrations ...", flush=True)
    config = prepare_run(config, run_dir, demo_episodes)
    specs = build_graph(config, args.backend, str(run_dir), args.namespace)
    if args.resume:
        check_resumable(run_dir, specs)
    params_path = params_file(specs, run_dir / "params.yaml")
    actor_params = next((s.parameters for s in specs if s.name == actor), {})
    eval_path = run_dir / "eval.json"
    eval_path.unlink(missing_ok=True)
    juggle_path = run_dir / "juggle_actor_summary.json"  # the juggling actor's result instead
    juggle_path.unlink(missing_ok=True)

    monitor = Monitor(int(actor_params.get("total_steps", 0)), int(actor_params.get("eval_episodes", 0)), actor=actor)
    codes, code = run_graph(specs, params_path, run_dir, env, monitor, plain=args.plain,
                            status_period=args.status_period)
    if codes:
        print("robot_rl: exit codes " + ", ".join(f"{n}={c}" for n, c in codes.items()), flush=True)
    if eval_path.exists():
        result = json.loads(eval_path.read_text())
        print(f"robot_rl: evaluation success rate {result['success_rate'] * 100:.1f}% over {result['episodes']} "
              f"episodes (policy v{result['policy_version']}, {result['train_steps']} training steps)", flush=True)
        if "laps" in result:
            print(f"robot_rl: {len(result['laps'])} clean laps, first at step {result['first_lap_step']}, best "
                  f"{result['best_lap_s']} s", flush=True)
        print(json.dumps(result), flush=True)
        if not result.get("transitions_acked_all", True):
            code = code or 3
    elif juggle_path.exists():
        result = json.loads(juggle_path.read_text())
        print(f"robot_rl: juggling, {result['mean_hits']:.1f} hits per episode over {result['episodes']} episodes "
              f"(ended by {result['ended_by']})", flush=True)
        print(json.dumps(result), flush=True)
    elif code == 0:
        code = 1
        print("robot_rl: no evaluation result was produced", file=sys.stderr)
    return code


def _replace_dataset(out: Path, recording: Path) -> None:
    """Puts the dataset a session recorded in place of `out` (one directory swap)."""
    if not recording.exists():
        print(f"robot_rl: nothing was recorded; {out} is unchanged", flush=True)
        return
    with atomic_path(out, directory=True) as swap:
        os.replace(recording, swap)


def cmd_record(args: argparse.Namespace) -> int:
    """A teleop recording session: robot (sim in real time, or the real arm), teleop node, and the
    actor in record mode writing the person's episodes to a zarr dataset."""
    from robot_rl.ros.graph import apply_overrides, build_graph, config_path, discovery_environment, load_config, \
        node_names, params_file

    config = load_config(args.config or config_path(args.task))
    out = _dataset_out(args).resolve()
    # Replacing a dataset: the session records a new one beside it, swapped in when the session ends;
    # otherwise the actor commits episode by episode into --out itself.
    recording = out.with_name(f"{TEMP_PREFIX}{out.name}-{os.getpid()}") if args.overwrite and out.exists() else out
    scripted = args.device == "scripted"
    robot = [n for n in config["robot_rl"]["nodes"] if n not in ("actor", "learner", "teleop", "scripted_human")]
    nodes = [*robot, "actor", "teleop", *(["scripted_human"] if scripted else [])]
    overrides = {"robot_rl.nodes": nodes, "robot_rl.demos": {"episodes": 0},
                 "actor.mode": "record", "actor.record_path": str(recording), "actor.record_episodes": args.episodes,
                 "actor.sync_updates_per_step": 0.0, "teleop.device": "joy" if scripted else args.device}
    if "sim" in robot:
        overrides["sim.clock_mode"] = "realtime"  # a person (scripted too: it reacts in wall time) needs real time
    keyboard_here = args.device == "keyboard" and not args.device_path
    if keyboard_here:
        if not sys.stdin.isatty():
            raise SystemExit("record --device keyboard needs a terminal (or --device-path /dev/pts/N of another one)")
        overrides["teleop.device_path"] = os.ttyname(sys.stdin.fileno())
    elif args.device_path:
        overrides["teleop.device_path"] = args.device_path
    if args.mapping:
        overrides["teleop.mapping"] = args.mapping
    if scripted:
        overrides.update({"scripted_human.task": config["robot_rl"]["task"], "scripted_human.takeover_prob_start": 1.0,
                          "scripted_human.takeover_prob_end": 1.0, "scripted_human.off_track_steps": 1,
                          "scripted_human.hold_steps": 1_000, "scripted_human.label_success": True,
                          "teleop.hold_s": 0.05})
    settings = _parse_overrides(args.set)
    config = apply_overrides(config, {**overrides, **settings})
    _refuse_settings_outside(node_names(config, args.backend), settings)
    run_dir = Path(args.run_dir or f"runs/record-{config['robot_rl']['task']}-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    domain_id, domain_source = _domain_id(args.domain_id)
    env = discovery_environment(args.backend, domain_id)
    os.environ.update(env)
    print(f"robot_rl: recording {config['robot_rl']['task']} with {args.device} into {out}, run dir {run_dir}, "
          f"ROS_DOMAIN_ID={domain_id} ({domain_source}), {_discovery_note(args.backend, env)}", flush=True)
    specs = build_graph(config, args.backend, str(run_dir))
    params_path = params_file(specs, run_dir / "params.yaml")
    (run_dir / "record.json").unlink(missing_ok=True)
    monitor = Monitor(0, 0, record_episodes=args.episodes)
    # The keyboard puts this terminal in raw mode: plain lines with their own carriage returns.
    codes, code = run_graph(specs, params_path, run_dir, env, monitor, plain=args.plain or keyboard_here,
                            status_period=args.status_period, line_end="\r" if keyboard_here else "")
    if recording != out:
        _replace_dataset(out, recording)
    summary_path = run_dir / "record.json"
    if summary_path.exists():
        print(json.dumps(json.loads(summary_path.read_text())), flush=True)
    elif out.exists():
        from robot_rl.data.episodes import EpisodeDataset

        data = EpisodeDataset(out)
        print(json.dumps({"dataset": str(out), "episodes": len(data), "steps": data.num_steps}), flush=True)
    if codes.get("actor", 0) not in (0, None):
        code = code or 1
    return code


def cmd_report(args: argparse.Namespace) -> int:
    from robot_rl.training.report import load_run, write_report

    try:
        rows = load_run(args.run)
        out = write_report(rows, args.out or Path(args.run) / "report.png", window=args.window,
                           title=args.title or Path(args.run).resolve().name)
    except (FileNotFoundError, ValueError) as exc:
        print(f"robot-rl report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(rows)} episodes)")
    return 0


def checked_fields(defaults, values: dict, prefix: str, exclude: tuple[str, ...] = ()) -> dict:
    """`values` for fields of the dataclass instance `defaults`, each converted to the type of its
    default as node parameters are (an integer where a float is declared is that float); an
    unknown field or a value of the wrong type raises UserError naming it (and the closest field)."""
    from dataclasses import fields

    from robot_rl.ros.node_utils import Param, ParameterError, closest_name, coerce_value

    declared = {f.name: getattr(defaults, f.name) for f in fields(defaults) if f.name not in exclude}
    out = {}
    for name, value in values.items():
        if name not in declared:
            raise UserError(f"unknown setting {prefix}{name}{closest_name(name, declared)}")
        default = declared[name]
        if default is None or value is None or isinstance(default, dict):  # no type to hold it to
            out[name] = value
            continue
        try:
            out[name] = coerce_value(Param(f"{prefix}{name}", default, ""), value)
        except ParameterError as exc:
            raise UserError(str(exc)) from None
    return out


def checked_env_id(env_id: str) -> str:
    """A registered Gymnasium id (ours included); UserError with the closest registered ones otherwise."""
    import difflib

    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers our environments

    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        raise UserError(f"--env {env_id!r}: {exc}" + (f" Closest: {', '.join(close)}" if close else "")) from None
    return env_id


def gym_train_config(args: argparse.Namespace):
    """GymTrainConfig from --env/--steps/--seed/--encoder and --set field=value (sac.*, encoder.* nest)."""
    from dataclasses import replace

    from robot_rl.agents.encoders import pretrained_config
    from robot_rl.agents.sac import SACConfig
    from robot_rl.training.gym_loop import GymTrainConfig

    checked_env_id(args.env)
    top, sac = {}, {}
    for key, value in _parse_overrides(args.set).items():
        group, _, name = key.rpartition(".")
        if group not in ("", "sac"):
            raise UserError(f"--set with --env takes FIELD=VALUE or sac.FIELD=VALUE, got {key!r}")
        (sac if group == "sac" else top)[name] = value
    misplaced = sorted(k for k in top if hasattr(SACConfig(), k) and not hasattr(GymTrainConfig(args.env), k))
    if misplaced:
        raise UserError(f"unknown setting --set {misplaced[0]} (did you mean 'sac.{misplaced[0]}'?)")
    sac = checked_fields(SACConfig(), sac, "--set sac.")
    top = checked_fields(GymTrainConfig(args.env), top, "--set ", exclude=("env_id", "sac", "encoder"))
    config = GymTrainConfig(args.env, sac=SACConfig(**sac), **top)
    if args.steps is not None:
        config = replace(config, total_steps=args.steps)
    if args.seed is not None:
        config = replace(config, seed=args.seed)
    if args.eval_episodes is not None:
        config = replace(config, eval_episodes=args.eval_episodes)
    if args.encoder:
        import gymnasium as gym

        probe = gym.make(args.env, **config.env_kwargs)
        state = probe.observation_space.spaces.get("state") if hasattr(probe.observation_space, "spaces") else None
        probe.close()
        config = replace(config, encoder=pretrained_config(args.encoder, state_dim=state.shape[0] if state else 0))
    return config


def cmd_train_env(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import robot_rl.envs  # noqa: F401 - registers our environments
    from robot_rl.tasks import expert_for_env
    from robot_rl.training.gym_loop import Trainer

    if getattr(args, "resume", False):
        raise UserError("--resume is for node-graph runs; a --env run starts afresh (--overwrite or a new --run-dir)")
    config = gym_train_config(args)
    run_dir = Path(args.run_dir or f"runs/{config.env_id.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}")
    check_output(run_dir, "run directory", overwrite=getattr(args, "overwrite", False))
    expert = expert_for_env(config.env_id)
    if expert is None:
        config = replace(config, demo_episodes=0)
    trainer = Trainer(config, expert=expert, log=lambda row: print(json.dumps(row), flush=True))
    print(f"robot_rl: {config.env_id} for {config.total_steps} steps on {trainer.device}, run dir {run_dir}", flush=True)
    history = trainer.run()
    trainer.agent.policy.network.cpu()
    import torch

    with atomic_path(run_dir, directory=True) as tmp:  # the run appears whole, with its policy, or not at all
        (tmp / "history.json").write_text(json.dumps(history, indent=1))
        torch.save({"spec": trainer.agent.policy.spec.to_json(), "weights": trainer.agent.policy.network.state_dict()},
                   tmp / "policy.pt")
    final = history[-1]
    print(f"robot_rl: evaluation success rate {final['success_rate'] * 100:.1f}%, mean return "
          f"{final['mean_return']:.2f} after {final['steps']} steps", flush=True)
    return 0


def cmd_pretrain_encoder(args: argparse.Namespace) -> int:
    import robot_rl.envs  # noqa: F401
    from robot_rl.training.pretrain_encoder import PretrainConfig, pretrain_and_save

    check_output(args.out, "encoder directory", overwrite=args.overwrite)
    config = PretrainConfig(frames=args.frames, epochs=args.epochs, seed=args.seed)
    metrics = pretrain_and_save(config, args.out)
    print(json.dumps(metrics))
    return 0


def cmd_node(args: argparse.Namespace, rest: list[str]) -> int:
    from robot_rl.ros.graph import NODE_KINDS

    if args.name not in NODE_KINDS:
        raise UserError(f"unknown node {args.name!r}; known: {', '.join(sorted(NODE_KINDS))}")
    import importlib

    module = importlib.import_module(NODE_KINDS[args.name].module)
    return module.main([sys.argv[0], *rest])


def _dataset_out(args: argparse.Namespace) -> Path:
    """--out of a command writing a dataset: an existing one is refused unless --append or --overwrite."""
    return check_output(args.out, "dataset", overwrite=args.overwrite, append=args.append, appendable=True)


def cmd_demos(args: argparse.Namespace) -> int:
    _dataset_out(args)  # refused before the episodes are collected
    if args.env:
        return _demos_episodes(args)
    from robot_rl.data.dataset import save_transitions
    from robot_rl.envs.arm import ArmSim
    from robot_rl.tasks import get_task
    from robot_rl.training.local import collect_demonstrations

    task = get_task(args.task)
    robot = ArmSim()
    try:
        arrays, info = collect_demonstrations(task, robot, args.episodes, args.seed, args.noise)
    finally:
        robot.close()
    save_transitions(args.out, arrays, {"task": task.name, "source": "scripted_expert", **info},
                     overwrite=args.overwrite, append=args.append)
    print(f"wrote {len(arrays['reward'])} transitions from {info['episodes']} episodes to {args.out}")
    return 0


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
        print(f"robot-rl demos: {args.env} has no scripted expert", file=sys.stderr)
        return 2
    if not args.goal:
        print("robot-rl demos --env: give the task's goal sentence with --goal", file=sys.stderr)
        return 2
    env_kwargs = {"image_size": args.image_size, "randomization_split": args.split}
    # Appended in place (episode by episode, as the writer commits them); otherwise built beside --out and
    # renamed into place when complete, so a failed run leaves no partial or half-replaced dataset.
    with contextlib.nullcontext(args.out) if args.append else atomic_path(args.out, directory=True) as target:
        stats = record_scripted_episodes(str(target), args.env, expert, args.episodes, goal=args.goal,
                                         seed=args.seed, noise=args.noise, env_kwargs=env_kwargs,
                                         successful_only=not args.random)
    print(f"wrote {stats['episodes']} episodes ({stats['steps']} steps, {stats['attempts']} attempts) to {args.out}")
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    from robot_rl.data.integrity import verify_dataset

    print(verify_dataset(args.path).summary())
    return 0


def _progress_episodes(args: argparse.Namespace) -> list:
    from robot_rl.rewards.progress import progress_episodes

    episodes = []
    for path in args.demos:
        episodes += progress_episodes(path, goal=args.goal)
    return episodes


def cmd_reward(args: argparse.Namespace) -> int:
    from robot_rl.rewards.progress import ProgressModel, ProgressModelConfig, train_progress_model
    from robot_rl.rewards.quality import evaluate_progress

    if args.action == "train":
        check_output(args.out, "reward model directory", overwrite=args.overwrite)
    episodes = _progress_episodes(args)
    if args.action == "train":
        config = ProgressModelConfig(steps=args.steps, seed=args.seed, device=args.device,
                                     **({"encoder_weights": args.encoder} if args.encoder else {}))
        model, metrics = train_progress_model(episodes, config, f"robot-rl reward train --demos {' '.join(args.demos)}")
        model.save(args.out)
        print(json.dumps({"model": args.out, **metrics}))
        return 0
    model = ProgressModel.load(args.model, device=args.device)
    goals = sorted({e.goal for e in episodes})
    wrong = args.wrong_goal or "open the drawer"
    metrics = evaluate_progress(model, episodes, args.done_threshold or model.done_threshold,
                                {g: (wrong if wrong != g else "wipe the table") for g in goals})
    print(json.dumps({"model": args.model, "goals": goals, "wrong_goal": wrong, **metrics}))
    return 0


def cmd_security(args: argparse.Namespace) -> int:
    enclaves = init_keystore(args.task, args.keystore, overwrite=args.overwrite, backend=args.backend,
                             namespace=args.namespace)
    print(f"robot-rl security: keystore {args.keystore} with enclaves {', '.join(enclaves)}")
    print(ENFORCEMENT_NOTE.format(keystore=Path(args.keystore).resolve()))
    return 0


def cmd_record_bag(args: argparse.Namespace) -> int:
    from robot_rl.bag import record

    check_output(args.out, "bag file", overwrite=args.overwrite)
    summary = record(args.topics, args.out, duration=args.duration, compression=args.compression,
                     overwrite=args.overwrite)
    print(f"record-bag: wrote {summary.messages} messages from {len(summary.topics)} topic(s) to {summary.path} "
          f"in {summary.duration_s:.1f} s", flush=True)
    return 0


def cmd_juggle(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from robot_rl.training.juggle import JuggleTrainConfig, evaluate_policy, summarize, train_juggling

    if args.action == "eval":
        from robot_rl.agents.ppo import DeployedPolicy

        policy = DeployedPolicy.load(args.policy)
        overrides = {"ball_mass": args.ball_mass} if args.ball_mass else None
        summary = summarize(evaluate_policy(policy, args.trials, args.max_s, overrides=overrides, seed=args.seed))
        print(json.dumps(summary))
        return 0
    out = Path(args.out)
    run_dir = Path(args.run_dir) if args.run_dir else out.parent / f"{out.name}-run"
    check_output(out, "policy directory", overwrite=args.overwrite)
    check_output(run_dir, "run directory", overwrite=args.overwrite)
    config = replace(JuggleTrainConfig(), num_envs=args.num_envs, iterations=args.iterations, seed=args.seed,
                     device=args.device, physics=args.physics, time_budget_s=args.time_budget_min * 60.0)
    card = train_juggling(config, out, run_dir)
    print(json.dumps(card.get("evaluation_during_training", {})))
    return 0


def cmd_car(args: argparse.Namespace) -> int:
    from dataclasses import replace

    if args.action == "pretrain":
        from robot_rl.agents.iql import IQLConfig
        from robot_rl.training.pretrain_car import CarPretrainConfig, pretrain_car

        check_output(args.out, "policy directory", overwrite=args.overwrite)
        config = CarPretrainConfig(dataset=args.dataset, tracks=args.tracks, steps_per_track=args.steps_per_track,
                                   updates=args.updates, iql=replace(IQLConfig(), batch_size=args.batch_size),
                                   seed=args.seed, device=args.device)
        card = pretrain_car(config, args.out, log=lambda row: print(json.dumps(row), flush=True))
        print(json.dumps(card["final_metrics"]))
        return 0
    from robot_rl.training.car_race import CarTrainConfig, CarTrainer

    check_output(args.out, "policy directory", overwrite=args.overwrite)
    sac = replace(CarTrainConfig().sac, **checked_fields(CarTrainConfig().sac, _parse_overrides(args.set), "--set "))
    config = CarTrainConfig(policy=None if args.policy == "none" else args.policy, track_seed=args.track_seed,
                            total_steps=args.steps, seed=args.seed, sac=sac, updates_per_step=args.updates_per_step,
                            device=args.device)
    trainer = CarTrainer(config, log=lambda row: print(json.dumps(row), flush=True))
    try:
        trainer.run()
        trainer.export(args.out)
    finally:
        trainer.close()
    print(json.dumps({"laps": len(trainer.laps), "first_lap_step": trainer.laps[0][0] if trainer.laps else None,
                      "best_lap_s": min((t for _, t in trainer.laps), default=None), "policy": args.out}))
    return 0


def _at_least(minimum: int | float, kind: type = int):
    """An argparse type: a number of `kind` no smaller than `minimum` (a negative count, a zero
    trial length ... are refused at parse time with the flag named)."""
    def parse(text: str):
        value = kind(text)  # a ValueError here: argparse says "invalid int value: 'x'"
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _domain_id_arg(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 232:  # the DDS port mapping leaves 0-232 on Linux
        raise argparse.ArgumentTypeError(f"a ROS_DOMAIN_ID is 0-232, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line (exit 2), like every other refused input."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _overwrite_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--overwrite", action="store_true", help=f"replace {what} if it exists (refused otherwise)")


def _dataset_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--append", action="store_true",
                        help="add to an existing dataset (same schema and task; refused otherwise)")
    _overwrite_flag(parser, "an existing dataset")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="robot-rl", description="Reinforcement learning on robots over ROS 2.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="start the task's node graph (sim, actor, learner) and train")
    train.add_argument("--task", default="arm_lift")
    train.add_argument("--env", help="train on this Gymnasium id in one process, without ROS (--set FIELD=VALUE "
                                     "and --set sac.FIELD=VALUE set GymTrainConfig/SACConfig)")
    train.add_argument("--encoder", help="with --env: a pretrained encoder directory, used frozen")
    train.add_argument("--config", help="task config YAML (default: config/<task>.yaml of the package)")
    train.add_argument("--backend", default="sim", choices=["sim", "real"])
    train.add_argument("--namespace", default="", help="namespace for every node of the graph")
    train.add_argument("--run-dir", help="where checkpoints, logs and results go (default: runs/<task>-<time>)")
    train.add_argument("--resume", action="store_true", help="carry on an existing run directory (its checkpoint, "
                                                             "journal, step counters and logs)")
    train.add_argument("--overwrite", action="store_true", help="empty an existing run directory and start afresh")
    train.add_argument("--steps", type=_at_least(1), help="training environment steps (actor.total_steps)")
    train.add_argument("--eval-episodes", type=_at_least(0), help="evaluation episodes after training")
    train.add_argument("--seed", type=_at_least(0))
    train.add_argument("--domain-id", type=_domain_id_arg, help="ROS_DOMAIN_ID (default: the exported one, else a random one)")
    train.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                       help="override a node parameter, e.g. --set learner.utd_ratio=2")
    train.add_argument("--plain", action="store_true", help="plain status lines instead of a live display")
    train.add_argument("--status-period", type=_at_least(0.1, float), default=10.0, help="seconds between plain status lines")
    pre = sub.add_parser("pretrain-encoder", help="pretrain the arm vision encoder on randomized sim images")
    pre.add_argument("--out", required=True, help="output directory (weights + card.json)")
    pre.add_argument("--frames", type=_at_least(1), default=30_000)
    pre.add_argument("--epochs", type=_at_least(1), default=8)
    pre.add_argument("--seed", type=_at_least(0), default=0)
    _overwrite_flag(pre, "the encoder directory")
    node = sub.add_parser("node", help="run one node of the package (ROS arguments follow)")
    node.add_argument("name")
    demos = sub.add_parser("demos", help="record scripted demonstrations to a zarr dataset")
    demos.add_argument("--task", default="arm_lift")
    demos.add_argument("--episodes", type=_at_least(1), default=20)
    demos.add_argument("--noise", type=_at_least(0.0, float), default=0.1)
    demos.add_argument("--seed", type=_at_least(0), default=0)
    demos.add_argument("--out", required=True)
    _dataset_flags(demos)
    demos.add_argument("--env", help="a camera Gymnasium task with a scripted expert (e.g. robot_rl/ArmPickCube-v0): "
                                     "write an episode dataset with frames, success labels and --goal")
    demos.add_argument("--goal", help="with --env: the task's goal sentence, stored in the dataset")
    demos.add_argument("--image-size", type=_at_least(8), default=128, help="with --env: camera frame size")
    demos.add_argument("--split", default="train", help="with --env: randomization split")
    demos.add_argument("--random", action="store_true", help="with --env: uniformly random actions instead of the "
                                                             "expert, every episode kept (failures: negatives for a "
                                                             "reward model)")
    rec = sub.add_parser("record", help="teleop recording session: a person drives, episodes go to a zarr dataset")
    rec.add_argument("--task", default="arm_pick_cube", help="task (its config/<task>.yaml gives the robot and cameras)")
    rec.add_argument("--config", help="task config YAML instead of the package's")
    rec.add_argument("--out", required=True, help="zarr episode dataset")
    _dataset_flags(rec)
    rec.add_argument("--episodes", type=_at_least(0), default=20, help="episodes to keep (0: until Ctrl-C)")
    rec.add_argument("--device", default="spacemouse", choices=["spacemouse", "evdev", "joy", "keyboard", "scripted"],
                     help="input device; scripted: the scripted human on a virtual gamepad (tests, demos)")
    rec.add_argument("--device-path", help="which device (see the teleop node's device_path)")
    rec.add_argument("--mapping", help="teleop mapping file (default: the device's)")
    rec.add_argument("--backend", default="sim", choices=["sim", "real"])
    rec.add_argument("--run-dir", help="logs and record.json (default: runs/record-<task>-<time>)")
    rec.add_argument("--domain-id", type=_domain_id_arg, help="ROS_DOMAIN_ID (default: the exported one, else a random one)")
    rec.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE", help="override a node parameter")
    rec.add_argument("--plain", action="store_true", help="plain status lines instead of a live display")
    rec.add_argument("--status-period", type=_at_least(0.1, float), default=5.0, help="seconds between plain status lines")
    rep = sub.add_parser("report", help="PNG of success and intervention rate over a run")
    rep.add_argument("run", help="run directory (episodes.jsonl of robot-rl train, or history.json of train --env)")
    rep.add_argument("--out", help="output PNG (default: <run>/report.png)")
    rep.add_argument("--window", type=_at_least(1), default=20, help="episodes per moving average")
    rep.add_argument("--title")
    reward = sub.add_parser("reward", help="train or evaluate the local progress reward model (VLAC-style)")
    reward_sub = reward.add_subparsers(dest="action", required=True)
    for action, text in (("train", "train on episode datasets (teleop recordings or robot-rl demos)"),
                         ("eval", "print value-order correlation, negative share, wrong-goal mean and done F1")):
        p = reward_sub.add_parser(action, help=text)
        p.add_argument("--demos", nargs="+", required=True, metavar="DATASET", help="zarr episode datasets")
        p.add_argument("--goal", help="goal sentence of every dataset (default: each dataset's task config goal)")
        p.add_argument("--device", default="cpu", help="torch device")
    reward_train, reward_eval = reward_sub.choices["train"], reward_sub.choices["eval"]
    reward_train.add_argument("--out", required=True, help="output directory (weights + card.json)")
    reward_train.add_argument("--steps", type=_at_least(1), default=3000, help="gradient steps")
    reward_train.add_argument("--encoder", help="pretrained encoder directory (default: the shipped arm encoder)")
    reward_train.add_argument("--seed", type=_at_least(0), default=0)
    _overwrite_flag(reward_train, "the model directory")
    reward_eval.add_argument("--model", required=True, help="directory written by robot-rl reward train")
    reward_eval.add_argument("--wrong-goal", help="goal to score the demonstrations against for the wrong-goal mean")
    reward_eval.add_argument("--done-threshold", type=float, help="default: the model's own")
    juggle = sub.add_parser("juggle", help="quadrotor juggling (JuggleRL): PPO training and evaluation, no ROS")
    juggle_sub = juggle.add_subparsers(dest="action", required=True)
    jtrain = juggle_sub.add_parser("train", help="train from scratch; exports the best evaluated policy")
    jtrain.add_argument("--out", required=True, help="policy directory (policy.safetensors + card.json)")
    jtrain.add_argument("--run-dir", help="checkpoints and TensorBoard (default: <out>-run)")
    jtrain.add_argument("--num-envs", type=_at_least(1), default=2048)
    jtrain.add_argument("--iterations", type=_at_least(1), default=1500)
    jtrain.add_argument("--time-budget-min", type=_at_least(0.0, float), default=0.0, help="stop after this many minutes (0: none)")
    jtrain.add_argument("--seed", type=_at_least(0), default=0)
    _overwrite_flag(jtrain, "the policy and run directories (retraining a shipped policy too)")
    jtrain.add_argument("--device", default="auto")
    jtrain.add_argument("--physics", default="auto", choices=["auto", "rollout", "warp"],
                        help="simulation back end (auto: MuJoCo Warp on a GPU, else mujoco.rollout on CPU threads)")
    jeval = juggle_sub.add_parser("eval", help="juggling trials in randomized sim; prints hits per trial (JSON)")
    jeval.add_argument("--policy", required=True)
    jeval.add_argument("--trials", type=_at_least(1), default=10)
    jeval.add_argument("--max-s", type=_at_least(0.02, float), default=600.0, help="simulated length limit of a trial [s]")
    jeval.add_argument("--ball-mass", type=_at_least(1e-4, float), help="fix the ball mass [kg] (e.g. 0.005)")
    jeval.add_argument("--seed", type=_at_least(0), default=1000)
    car = sub.add_parser("car", help="race car (FastRLAP): IQL pretraining on prior driving, online RL, no ROS")
    car_sub = car.add_subparsers(dest="action", required=True)
    cpre = car_sub.add_parser("pretrain", help="record prior driving (if missing) and pretrain encoder + actor with IQL")
    cpre.add_argument("--out", required=True, help="frame-stack policy directory (encoder, actor, card.json)")
    cpre.add_argument("--dataset", default="runs/car_prior.zarr", help="prior driving dataset (recorded if missing)")
    cpre.add_argument("--tracks", type=_at_least(1), default=24)
    cpre.add_argument("--steps-per-track", type=_at_least(1), default=800)
    cpre.add_argument("--updates", type=_at_least(1), default=6000)
    cpre.add_argument("--batch-size", type=_at_least(1), default=256)
    cpre.add_argument("--seed", type=_at_least(0), default=0)
    _overwrite_flag(cpre, "the policy directory")
    cpre.add_argument("--device", default="auto")
    ctrain = car_sub.add_parser("train", help="online SAC on the held-out track with the frozen pretrained encoder")
    ctrain.add_argument("--out", required=True, help="where the trained frame-stack policy goes")
    ctrain.add_argument("--policy", default="policies/car_race_iql_64",
                        help="pretrained frame-stack policy ('none': random frozen encoder, fresh actor)")
    ctrain.add_argument("--track-seed", type=_at_least(0), default=7)
    ctrain.add_argument("--steps", type=_at_least(1), default=48_000)
    ctrain.add_argument("--updates-per-step", type=_at_least(0.001, float), default=1.0)
    ctrain.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="SACConfig override, e.g. --set utd_ratio=2 --set num_critics=2")
    ctrain.add_argument("--seed", type=_at_least(0), default=0)
    _overwrite_flag(ctrain, "the policy directory")
    ctrain.add_argument("--device", default="auto")
    security = sub.add_parser("security", help="SROS2 keystore with least-privilege enclaves for a task's graph")
    security_sub = security.add_subparsers(dest="action", required=True)
    sinit = security_sub.add_parser("init", help="write a CA and one enclave per node (permissions from the graph)")
    sinit.add_argument("--task", default="arm_lift")
    sinit.add_argument("--keystore", default="keystore", help="output directory")
    sinit.add_argument("--backend", default="sim", choices=["sim", "real"])
    sinit.add_argument("--namespace", default="", help="namespace of the graph's nodes")
    sinit.add_argument("--overwrite", action="store_true", help="replace an existing keystore")
    dataset = sub.add_parser("dataset", help="check a zarr dataset")
    dataset_sub = dataset.add_subparsers(dest="action", required=True)
    verify = dataset_sub.add_parser("verify", help="check that every chunk of every array is there and its checksum "
                                                   "matches (exit 2 naming the first damaged one)")
    verify.add_argument("path", help="zarr dataset (robot-rl demos, record)")
    bag = sub.add_parser("record-bag", help="record topics to an MCAP file (ROS 2 profile) until Ctrl-C or "
                                            "--duration")
    bag.add_argument("--topics", nargs="+", required=True, metavar="TOPIC", help="topics to record (any types)")
    bag.add_argument("--out", required=True, help="output .mcap file")
    bag.add_argument("--duration", type=_at_least(0.001, float), help="seconds to record (default: until Ctrl-C)")
    bag.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "none"], help="MCAP chunk compression")
    _overwrite_flag(bag, "the bag file")
    return parser


# Failures a user can cause and fix (a bad path, value, file or setting): one line, exit code 2.
# Anything else is a bug and keeps its traceback.
EXPECTED_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, ValueError,
                   yaml.YAMLError)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)) and exc.filename \
            and str(exc.filename) not in text:
        text = f"{exc.filename}: {text}"
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # --debug anywhere before --ros-args (users put it after the subcommand too).
    end = argv.index("--ros-args") if "--ros-args" in argv else len(argv)
    debug = "--debug" in argv[:end]
    argv = [a for a in argv[:end] if a != "--debug"] + argv[end:]
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    args.debug = debug
    if rest and args.command != "node":  # a node takes its --ros-args
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "node":
        command = lambda a: cmd_node(a, rest)  # noqa: E731
    elif args.command == "train" and args.env:
        command = cmd_train_env
    else:
        command = {"train": cmd_train, "demos": cmd_demos, "record-bag": cmd_record_bag, "record": cmd_record,
                   "report": cmd_report, "pretrain-encoder": cmd_pretrain_encoder, "reward": cmd_reward,
                   "juggle": cmd_juggle, "car": cmd_car, "security": cmd_security, "dataset": cmd_dataset}[args.command]
    name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        return command(args)
    except EXPECTED_ERRORS as exc:
        if args.debug:
            raise
        print(f"robot-rl {name}: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"robot-rl {name}: interrupted; outputs being written were not kept", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
