"""`robot-rl train --env`: SAC/RLPD on any Gymnasium environment in one process, without ROS."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from robot_rl.cli.args import parse_settings
from robot_rl.outputs import UserError, atomic_path, check_output


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
    """A registered Gymnasium id (ours included; "module:Id" imports the module that registers it first);
    UserError with the closest registered ones otherwise."""
    import difflib
    import importlib

    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers our environments

    module, sep, name = env_id.partition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UserError(f"--env {env_id!r}: cannot import {module!r} ({exc})") from None
    try:
        gym.spec(name if sep else env_id)
    except gym.error.Error as exc:
        close = difflib.get_close_matches(name if sep else env_id, list(gym.registry), n=3)
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


def gym_train_config(args: argparse.Namespace):
    """GymTrainConfig from --env/--steps/--seed/--encoder and --set field=value (sac.*, encoder.* nest)."""
    from dataclasses import replace

    from robot_rl.agents.encoders import pretrained_config
    from robot_rl.agents.sac import SACConfig
    from robot_rl.envs.canonical import NORMALIZE_MODES, AdapterConfig, parse_obs_keys
    from robot_rl.training.gym_loop import GymTrainConfig, make_env

    checked_env_id(args.env)
    groups: dict[str, dict] = {"": {}, "sac": {}, "adapter": {}}
    for key, value in parse_settings(args.set).items():
        group, _, name = key.rpartition(".")
        if group not in groups:
            raise UserError(f"--set with --env takes FIELD=VALUE, sac.FIELD=VALUE or adapter.FIELD=VALUE, got {key!r}")
        groups[group][name] = value
    top = groups[""]
    for group, defaults in (("sac", SACConfig()), ("adapter", AdapterConfig())):
        misplaced = sorted(k for k in top if hasattr(defaults, k) and not hasattr(GymTrainConfig(args.env), k))
        if misplaced:
            raise UserError(f"unknown setting --set {misplaced[0]} (did you mean '{group}.{misplaced[0]}'?)")
    sac = checked_fields(SACConfig(), groups["sac"], "--set sac.")
    adapter = checked_fields(AdapterConfig(), groups["adapter"], "--set adapter.", exclude=("obs_keys",))
    if "normalize_state" in adapter and adapter["normalize_state"] not in NORMALIZE_MODES:
        raise UserError(f"--set adapter.normalize_state must be one of {', '.join(NORMALIZE_MODES)}, "
                        f"got {adapter['normalize_state']!r}")
    adapter["obs_keys"] = parse_obs_keys(args.obs_keys)
    top = checked_fields(GymTrainConfig(args.env), top, "--set ", exclude=("env_id", "sac", "encoder", "adapter"))
    if args.env_kwargs:
        top["env_kwargs"] = env_kwargs_arg(args.env_kwargs)
    if args.demos:
        top["demo_dataset"] = args.demos
    config = GymTrainConfig(args.env, sac=SACConfig(**sac), adapter=AdapterConfig(**adapter), **top)
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
    from robot_rl.tasks import expert_for_env
    from robot_rl.training.gym_loop import Trainer

    if getattr(args, "resume", False):
        raise UserError("--resume is for node-graph runs; a --env run starts afresh (--overwrite or a new --run-dir)")
    config = gym_train_config(args)
    run_dir = Path(args.run_dir or f"runs/{config.env_id.replace('/', '_').replace(':', '_')}-"
                                  f"{time.strftime('%Y%m%d-%H%M%S')}")
    check_output(run_dir, "run directory", overwrite=getattr(args, "overwrite", False))
    expert = expert_for_env(config.env_id)
    if expert is None:
        config = replace(config, demo_episodes=0)
    # Written in a hidden sibling and renamed into place at the end: the run appears whole, with its policy, or not
    # at all (a crash leaves the sibling to look at).
    with atomic_path(run_dir, directory=True) as tmp:
        trainer = Trainer(config, expert=expert, run_dir=tmp, log=lambda row: print(
            json.dumps({k: v for k, v in row.items() if k != "results"}), flush=True))
        print(f"robot_rl: {config.env_id} for {config.total_steps} steps on {trainer.device}, run dir {run_dir}",
              flush=True)
        history = trainer.run()
        final = history[-1]
        (tmp / "history.json").write_text(json.dumps([{k: v for k, v in row.items() if k != "results"}
                                                      for row in history], indent=1))
        (tmp / "eval.json").write_text(json.dumps(
            {"episodes": len(final["results"]), "success_rate": final["success_rate"],
             "mean_return": final["mean_return"], "train_steps": final["steps"], "updates": final["updates"],
             "env_id": config.env_id, "results": final["results"]}, indent=2))
        trainer.save_checkpoint(tmp)
        trainer.save_policy(tmp / "policy.pt")
    print(f"robot_rl: evaluation success rate {final['success_rate'] * 100:.1f}%, mean return "
          f"{final['mean_return']:.2f} after {final['steps']} steps", flush=True)
    return 0
