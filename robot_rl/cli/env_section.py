"""`robot-rl train --env ID --graph`: the graph section's `env` from the command line."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from robot_rl.arguments import parse_settings
from robot_rl.cli.gym import adapter_config, checked_env_id, env_kwargs_arg
from robot_rl.outputs import UserError


def env_section(args: argparse.Namespace) -> tuple[dict, list[str]]:
    """--env ID --graph: the graph section's `env` (training/env_graph.py: EnvSection) from --env, --env-kwargs,
    --obs-keys, --set adapter.FIELD=VALUE, --expert, --demos and --control-hz; and the other --set pairs."""
    from robot_rl.envs.adapter import AdapterConfig

    if args.encoder:
        raise UserError("--encoder is the in-process path's; with --graph set --set learner.encoder=DIR")
    adapter_pairs = [p for p in args.set if p.startswith("adapter.")]
    adapter = {k.removeprefix("adapter."): v for k, v in parse_settings(adapter_pairs).items()}
    declared = {k: v for k, v in asdict(adapter_config(args, adapter)).items() if v != getattr(AdapterConfig(), k)}
    section = {"id": checked_env_id(args.env), "kwargs": env_kwargs_arg(args.env_kwargs), "adapter": declared,
               "expert": args.expert or "", "dataset": str(Path(args.demos).resolve()) if args.demos else "",
               "control_hz": args.control_hz, "max_episode_steps": args.max_episode_steps or 0}
    return section, [p for p in args.set if not p.startswith("adapter.")]

