"""`robot-rl train --env`: SAC/RLPD on any Gymnasium environment in one process, without ROS."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from robot_rl.arguments import dataset_out, parse_settings, recording_path, replace_dataset
from robot_rl.config_fields import checked_fields
from robot_rl.outputs import UserError, atomic_path, check_output


def checked_env_id(env_id: str) -> str:
    """A registered Gymnasium id (ours included; "module:Id" and "namespace/Id" import the module that registers
    it first, see `import_env_namespace`); UserError with the closest registered ones otherwise."""
    import difflib

    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers our environments
    from robot_rl.envs.adapter import import_env_namespace

    try:
        registry_id = import_env_namespace(env_id)
    except ImportError as exc:
        raise UserError(f"--env {env_id!r}: cannot import what registers it ({exc})") from None
    try:
        gym.spec(registry_id)
    except gym.error.Error as exc:
        close = difflib.get_close_matches(registry_id, list(gym.registry), n=3)
        raise UserError(f"--env {env_id!r}: {exc}" + (f" Closest: {', '.join(close)}" if close else "")) from None
    return env_id


def env_kwargs_arg(text: str | None) -> dict:
    """--env-kwargs: a JSON object (the environment's own keyword arguments)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--env-kwargs must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise UserError(f"--env-kwargs must be a JSON object, got {text!r}")
    return value


def _grouped_settings(items: list[str], groups: tuple[str, ...]) -> dict[str, dict]:
    """--set FIELD=VALUE / GROUP.FIELD=VALUE, by group ("" for the top level)."""
    grouped: dict[str, dict] = {group: {} for group in ("", *groups)}
    for key, value in parse_settings(items).items():
        group, _, name = key.rpartition(".")
        if group not in grouped:
            allowed = ", ".join(["FIELD=VALUE", *(f"{g}.FIELD=VALUE" for g in groups)])
            raise UserError(f"--set with --env takes {allowed}, got {key!r}")
        grouped[group][name] = value
    return grouped


def adapter_config(args: argparse.Namespace, settings: dict):
    """AdapterConfig from --set adapter.FIELD=VALUE and --obs-keys."""
    from robot_rl.envs.adapter import NORMALIZE_MODES, AdapterConfig, parse_obs_keys

    adapter = checked_fields(AdapterConfig(), settings, "--set adapter.", exclude=("obs_keys",))
    if "normalize_state" in adapter and adapter["normalize_state"] not in NORMALIZE_MODES:
        raise UserError(f"--set adapter.normalize_state must be one of {', '.join(NORMALIZE_MODES)}, "
                        f"got {adapter['normalize_state']!r}")
    adapter["obs_keys"] = parse_obs_keys(args.obs_keys)
    return AdapterConfig(**adapter)


def gym_train_config(args: argparse.Namespace):
    """GymTrainConfig from --env/--steps/--seed/--encoder/--demos/--env-kwargs/--obs-keys and --set field=value
    (sac.*, adapter.* nest)."""
    from dataclasses import replace

    from robot_rl.agents.encoders import pretrained_config
    from robot_rl.agents.sac import SACConfig
    from robot_rl.envs.adapter import AdapterConfig
    from robot_rl.training.gym_loop import GymTrainConfig, make_env

    checked_env_id(args.env)
    groups = _grouped_settings(args.set, ("sac", "adapter"))
    top = groups[""]
    for group, defaults in (("sac", SACConfig()), ("adapter", AdapterConfig())):
        misplaced = sorted(k for k in top if hasattr(defaults, k) and not hasattr(GymTrainConfig(args.env), k))
        if misplaced:
            raise UserError(f"unknown setting --set {misplaced[0]} (did you mean '{group}.{misplaced[0]}'?)")
    sac = checked_fields(SACConfig(), groups["sac"], "--set sac.")
    top = checked_fields(GymTrainConfig(args.env), top, "--set ", exclude=("env_id", "sac", "encoder", "adapter"))
    if args.env_kwargs:
        top["env_kwargs"] = env_kwargs_arg(args.env_kwargs)
    if args.demos:
        top["demo_dataset"] = args.demos
    if args.teleop:  # a person in the loop acts on the wall clock
        top.setdefault("control_hz", args.control_hz)
    config = GymTrainConfig(args.env, sac=SACConfig(**sac), adapter=adapter_config(args, groups["adapter"]), **top)
    if args.steps is not None:
        config = replace(config, total_steps=args.steps)
    if args.seed is not None:
        config = replace(config, seed=args.seed)
    if args.eval_episodes is not None:
        config = replace(config, eval_episodes=args.eval_episodes)
    if args.encoder:
        probe = make_env(config)
        probe.close()
        config = replace(config, encoder=pretrained_config(args.encoder, state_dim=probe.adapter.state_dim))
    return config


def cmd_train_env(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import robot_rl.envs  # noqa: F401 - registers our environments
    from robot_rl.ros.bag_import import imported_bag, is_bag
    from robot_rl.tasks import expert_for_env
    from robot_rl.training.gym_loop import Trainer, make_env

    if args.demos and is_bag(args.demos):  # a bag of a task of this environment: its episodes, for the run
        with imported_bag(args.demos, env_id=args.env) as dataset:
            return cmd_train_env(argparse.Namespace(**{**vars(args), "demos": str(dataset)}))
    if getattr(args, "resume", False):
        raise UserError("--resume is for node-graph runs; a --env run starts afresh (--overwrite or a new --run-dir)")
    config = gym_train_config(args)
    run_dir = Path(args.run_dir or f"runs/{config.env_id.replace('/', '_').replace(':', '_')}-"
                                  f"{time.strftime('%Y%m%d-%H%M%S')}")
    check_output(run_dir, "run directory", overwrite=getattr(args, "overwrite", False))
    expert = expert_for_env(config.env_id)
    if expert is None:
        config = replace(config, demo_episodes=0)
    probe = make_env(config)
    probe.close()
    observer, view_kwargs = _env_view(args, probe.adapter.cameras,
                                      run_dir.parent / f"{run_dir.name}-view-{time.strftime('%Y%m%d-%H%M%S')}.rrd")
    if view_kwargs:
        config = replace(config, env_kwargs={**config.env_kwargs, **view_kwargs})
    person = _person(args) if args.teleop else None
    # Written in a hidden sibling and renamed into place at the end: the run appears whole, with its policy. A
    # Ctrl-C keeps what it wrote (see _keep_interrupted_run); an error removes it.
    with atomic_path(run_dir, directory=True) as tmp:
        trainer = Trainer(config, expert=expert, run_dir=tmp, person=person, observer=observer,
                          log=lambda row: print(json.dumps(row), flush=True))
        print(f"robot_rl: {config.env_id} for {config.total_steps} steps on {trainer.device}, run dir {run_dir}",
              flush=True)
        try:
            history = trainer.run()
        except KeyboardInterrupt:
            _keep_interrupted_run(trainer, tmp, run_dir)
            raise
        finally:
            if person is not None:
                person.close()
            if observer is not None:
                observer.close()
        final = history[-1]
        results = trainer.last_evaluation["results"]
        (tmp / "history.json").write_text(json.dumps(history, indent=1))
        (tmp / "eval.json").write_text(json.dumps(
            {"episodes": len(results), "success_rate": final["success_rate"], "mean_return": final["mean_return"],
             "train_steps": final["steps"], "updates": final["updates"], "env_id": config.env_id,
             "results": results}, indent=2))
        trainer.save_checkpoint(tmp)
        trainer.save_policy(tmp / "policy.pt")
    print(f"robot_rl: evaluation success rate {final['success_rate'] * 100:.1f}%, mean return "
          f"{final['mean_return']:.2f} after {final['steps']} steps", flush=True)
    return 0


def _keep_interrupted_run(trainer, tmp: Path, run_dir: Path) -> None:
    """After a Ctrl-C: the policy as it is now and what the run logged (TensorBoard, episodes.jsonl) are moved
    to `run_dir`, or beside it when `run_dir` holds an earlier run (--overwrite replaces a run only when the new
    one finishes)."""
    if trainer.writer is not None:
        trainer.writer.close()
    trainer.save_policy(tmp / "policy.pt")
    (tmp / "INTERRUPTED").write_text(f"interrupted after {trainer.steps} steps; no final evaluation or checkpoint\n")
    kept = run_dir if not run_dir.exists() else run_dir.with_name(f"{run_dir.name}-interrupted-"
                                                                   f"{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(tmp, kept)
    tmp.mkdir()  # atomic_path removes its (now empty) directory as after any interruption
    print(f"robot_rl: interrupted after {trainer.steps} steps; the policy as it was and the logs are kept in {kept}",
          file=sys.stderr, flush=True)


def _person(args: argparse.Namespace):
    """The person's device, read in this process (LocalTeleop); UserError for what cannot work here."""
    from robot_rl.teleop.person import LocalTeleop

    if args.teleop == "keyboard" and not sys.stdin.isatty() and not args.device_path:
        raise UserError("--teleop keyboard reads this terminal, but stdin is not one (run it in a terminal, or "
                        "--device-path /dev/pts/N)")
    try:
        return LocalTeleop(args.teleop, args.mapping or "", args.device_path or "", speed=args.teleop_speed,
                           log=lambda level, message: print(f"robot_rl: teleop: {message}", file=sys.stderr,
                                                            flush=True))
    except ValueError as exc:
        raise UserError(f"--teleop {args.teleop}: {exc}") from None


def _record_env_adapter(args: argparse.Namespace):
    """The checked --env and its AdapterConfig (--set adapter.FIELD=VALUE, --obs-keys) of a recording command."""
    checked_env_id(args.env)
    groups = _grouped_settings(args.set, ("adapter",))
    if groups[""]:
        raise UserError(f"{args.command} --env takes --set adapter.FIELD=VALUE only, got {sorted(groups[''])}")
    return adapter_config(args, groups["adapter"])


def cmd_record_env(args: argparse.Namespace) -> int:
    """`robot-rl record --env`: a person's episodes from any Gymnasium environment into a dataset, no ROS
    (with --expert: a scripted expert's, `cmd_record_expert`)."""
    from robot_rl.data.env_recorder import EnvEpisodeRecorder
    from robot_rl.envs.adapter import make_canonical
    from robot_rl.training.env_session import EnvSessionConfig, record_env_session

    if args.expert:
        return cmd_record_expert(args)
    adapter = _record_env_adapter(args)
    out = dataset_out(args).resolve()
    env_kwargs = env_kwargs_arg(args.env_kwargs)
    env = make_canonical(args.env, env_kwargs, adapter, normalize=False)
    observer, view_kwargs = _env_view(args, env.adapter.cameras,
                                      out.parent / f"{out.name}-view-{time.strftime('%Y%m%d-%H%M%S')}.rrd")
    if view_kwargs:  # the environment's own window: made again, asked to render
        env.close()
        env = make_canonical(args.env, {**env_kwargs, **view_kwargs}, adapter, normalize=False)
    try:
        env.adapter.person_action([0.0] * 6, -1.0)  # refuses an action the device cannot drive, before it opens
        person = _person(args)
        try:
            recording = recording_path(args, out)
            recorder = EnvEpisodeRecorder(recording, args.env, env_kwargs, env.adapter)
            config = EnvSessionConfig(episodes=args.episodes, control_hz=args.control_hz,
                                      episode_time_s=args.episode_time_s, reset_time_s=args.reset_time_s,
                                      keep_idle=args.keep_idle, seed=args.seed)
            print(f"robot_rl: recording {args.env} with the {args.teleop} into {args.out} "
                  f"({config.episodes or 'unlimited'} episodes, {config.control_hz:g} Hz)", flush=True)
            try:
                summary = record_env_session(env, recorder, person, config, observer=observer,
                                             say=lambda line: print(f"robot_rl: {line}", flush=True))
            finally:
                if recording != out:  # replacing: the episodes recorded, even an interrupted session's, take its place
                    if not recorder.num_episodes:
                        shutil.rmtree(recording, ignore_errors=True)  # nothing kept: the old dataset stays
                    replace_dataset(out, recording)
        finally:
            person.close()
    finally:
        env.close()
        if observer is not None:
            observer.close()
    print(json.dumps({**summary, "dataset": str(args.out)}), flush=True)
    return 0


def cmd_record_expert(args: argparse.Namespace) -> int:
    """`robot-rl record --env ID --expert module:callable` and `robot-rl demos --env ID --expert ...`: a scripted
    expert's episodes (robot_rl.training.experts) into a dataset as a person's are recorded, no person, no ROS.
    Without --append the dataset is built beside --out and renamed into place when complete: an expert that
    fails too often leaves no partial dataset and an existing one (--overwrite) unchanged."""
    from robot_rl.data.env_recorder import EnvEpisodeRecorder
    from robot_rl.envs.adapter import make_canonical
    from robot_rl.training.experts import ATTEMPTS_PER_EPISODE, load_expert, record_expert_episodes

    adapter = _record_env_adapter(args)
    if args.episodes < 1:
        raise UserError(f"--expert records --episodes N (N >= 1), got {args.episodes}")
    try:
        expert = load_expert(args.expert)
    except ValueError as exc:
        raise UserError(f"--expert: {exc}") from None
    out = dataset_out(args).resolve()
    env_kwargs = env_kwargs_arg(args.env_kwargs)
    env = make_canonical(args.env, env_kwargs, adapter, normalize=False)
    print(f"robot_rl: recording {args.env} with the expert {args.expert} into {args.out} ({args.episodes} episodes, "
          f"{'every attempt' if args.keep_failures else 'successful ones'}, noise {args.noise:g})", flush=True)
    try:
        with contextlib.nullcontext(out) if args.append else atomic_path(out, directory=True) as target:
            recorder = EnvEpisodeRecorder(target, args.env, env_kwargs, env.adapter)
            try:
                summary = record_expert_episodes(env, recorder, expert, args.episodes, seed=args.seed,
                                                 noise=args.noise, successful_only=not args.keep_failures,
                                                 say=lambda line: print(f"robot_rl: {line}", flush=True))
            except RuntimeError as exc:
                kept = "the episodes recorded stay in it" if args.append else "it is unchanged"
                raise UserError(f"{exc} ({ATTEMPTS_PER_EPISODE} attempts per episode at most; --keep-failures "
                                f"keeps every attempt); {args.out}: {kept}") from None
    finally:
        env.close()
    print(json.dumps({**summary, "dataset": str(args.out)}), flush=True)
    return 0


def _env_view(args: argparse.Namespace, cameras: tuple[str, ...], default_rrd: Path):
    """What a person sees of an in-process session (--view): "rerun" logs it to Rerun (--view-out, else the
    viewer where a display exists, else `default_rrd`); "window" opens the environment's own window
    (render_mode "human", needs a display); "auto" is the Rerun viewer where a display exists, nothing
    otherwise; "off" nothing. Returns (observer or None, extra gymnasium.make keyword arguments)."""
    import importlib.util

    from robot_rl.view.rerun_log import SPAWN, VIEWER_URL_PREFIXES, RerunConfig, RerunSession, check_target, has_display

    view = args.view
    if view == "auto":  # a person's session shows itself where it can; an unattended run shows nothing
        person = args.command == "record" or args.teleop
        view = "rerun" if person and has_display() and importlib.util.find_spec("rerun") else "off"
    if view == "browser":
        raise UserError("--view browser is the node graph's view; with --env use --view rerun (a file, this "
                        "machine's viewer or rerun+http://HOST:9876/proxy) or --view window")
    if args.view_out and view != "rerun":
        raise UserError("--view-out is where --view rerun logs the session; add --view rerun")
    if view == "window":
        if not has_display():
            raise UserError("--view window needs a display (DISPLAY is not set); use --view rerun")
        return None, {"render_mode": "human"}
    if view == "off":
        return None, {}
    target = args.view_out or (SPAWN if has_display() else str(default_rrd))
    try:
        check_target(target)
    except ValueError as exc:
        raise UserError(f"--view-out: {exc}") from None
    if target != SPAWN and not target.startswith(VIEWER_URL_PREFIXES) and Path(target).exists():
        raise UserError(f"--view-out {target} already exists; choose another file")
    session = RerunSession(RerunConfig(target, cameras=cameras, recording_name=f"robot_rl {args.env}"))
    if session.path is not None:
        print(f"robot_rl: the session is logged to {target} (open it with: rerun {target})", flush=True)
    return session, {}
