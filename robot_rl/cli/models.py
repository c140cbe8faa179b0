"""`robot-rl pretrain-encoder` and `reward`: the recipes that train a model in one process, without ROS, and
write it to a directory (each robot adds its own: `robot_rl/robots/<robot>/recipes.py`)."""

from __future__ import annotations

import argparse
import json

from robot_rl.arguments import at_least, overwrite_flag, parse_settings
from robot_rl.outputs import UserError, check_output


def cmd_pretrain_encoder(args: argparse.Namespace) -> int:
    import robot_rl.envs  # noqa: F401
    from robot_rl.training.pretrain_encoder import PretrainConfig, pretrain_and_save

    check_output(args.out, "encoder directory", overwrite=args.overwrite)
    from robot_rl.cli.gym import adapter_config, checked_env_id, env_kwargs_arg
    from robot_rl.envs.adapter import make_canonical
    from robot_rl.envs.env_kwargs import make_env

    settings = parse_settings(args.set)
    if any(not key.startswith("adapter.") for key in settings):
        raise UserError(f"pretrain-encoder takes --set adapter.FIELD=VALUE only, got {sorted(settings)}")
    if args.env is None and (settings or args.obs_keys or args.episode_steps or args.action_hold_steps):
        raise UserError("--set adapter.*, --obs-keys, --episode-steps and --action-hold-steps are for an --env "
                        "environment; the shipped encoder's scenes come from their task's scripted expert")
    defaults = PretrainConfig()
    common = {"frames": args.frames, "epochs": args.epochs, "seed": args.seed,
              "episode_steps": args.episode_steps or defaults.episode_steps,
              "action_hold_steps": args.action_hold_steps or defaults.action_hold_steps}
    if args.env is None:
        config = PretrainConfig(env_kwargs={**defaults.env_kwargs, **env_kwargs_arg(args.env_kwargs)}, **common)
    else:
        adapter = adapter_config(args, {k.removeprefix("adapter."): v for k, v in settings.items()})
        config = PretrainConfig(env_id=checked_env_id(args.env), env_kwargs=env_kwargs_arg(args.env_kwargs),
                                adapter=adapter, **common)
    # A mistyped or out-of-range scene option, or an environment without cameras, fails here, not after minutes
    # of rendering.
    try:
        if config.adapter is None:
            make_env(config.env_id, config.env_kwargs).close()
        else:
            env = make_canonical(config.env_id, config.env_kwargs, config.adapter, normalize=False)
            env.close()
            if not env.adapter.cameras:
                raise ValueError(f"{config.env_id} with {config.env_kwargs} has no camera frames to pretrain on "
                                 "(give image observations in --env-kwargs)")
    except (TypeError, ValueError) as exc:  # make_env names the environment and the arguments it refused
        raise UserError(f"--env-kwargs: {exc}") from None
    metrics = pretrain_and_save(config, args.out)
    print(json.dumps(metrics))
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser("pretrain-encoder", help="pretrain a vision encoder on simulated images: the shipped "
                         "encoder's randomized scenes (the pick-cube task's, driven by its scripted expert), or "
                         "(--env) any MuJoCo environment under random actions")
    pre.add_argument("--out", required=True, help="output directory (weights + card.json)")
    pre.add_argument("--env", metavar="ID", help="any Gymnasium environment simulated in MuJoCo (module:Id or "
                     "namespace/Id): frames under random actions, body positions as targets (default: the shipped "
                     "encoder's scenes)")
    pre.add_argument("--obs-keys", help="--env: observation entries to use (as train --env)")
    pre.add_argument("--set", action="append", default=[], metavar="adapter.FIELD=VALUE",
                     help="--env: how its observations and actions are read (as train --env), e.g. "
                     "adapter.image_size=64")
    pre.add_argument("--episode-steps", type=at_least(1), help="--env: steps before each reset (a new scene; 20)")
    pre.add_argument("--action-hold-steps", type=at_least(1), help="--env: steps each random action is held (5)")
    pre.add_argument("--frames", type=at_least(1), default=30_000)
    pre.add_argument("--epochs", type=at_least(1), default=8)
    pre.add_argument("--seed", type=at_least(0), default=0)
    pre.add_argument("--env-kwargs", metavar="JSON", help="scene options: for the shipped encoder's scenes over "
                     "their defaults (image_size 64, the pretrain randomization split), e.g. "
                     "'{\"cube_xy_range\": 0.15}' for the wide pick-cube variant; for --env gymnasium.make's "
                     "keyword arguments")
    overwrite_flag(pre, "the encoder directory")
    pre.set_defaults(handler=cmd_pretrain_encoder)
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
    reward_train.add_argument("--steps", type=at_least(1), default=3000, help="gradient steps")
    reward_train.add_argument("--encoder", help="pretrained encoder directory (default: the shipped pick-cube encoder)")
    reward_train.add_argument("--seed", type=at_least(0), default=0)
    overwrite_flag(reward_train, "the model directory")
    reward_eval.add_argument("--model", required=True, help="directory written by robot-rl reward train")
    reward_eval.add_argument("--wrong-goal", help="goal to score the demonstrations against for the wrong-goal mean")
    reward_eval.add_argument("--done-threshold", type=float, help="default: the model's own")
    reward.set_defaults(handler=cmd_reward)
