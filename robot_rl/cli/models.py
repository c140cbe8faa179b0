"""`robot-rl pretrain-encoder`, `reward`, `juggle` and `car`: the recipes that train a model or a
policy in one process, without ROS, and write it to a directory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.cli.args import at_least, in_range, name_equals_numbers, overwrite_flag, parse_settings
from robot_rl.cli.gym import checked_fields
from robot_rl.outputs import UserError, atomic_path, check_output


def cmd_pretrain_encoder(args: argparse.Namespace) -> int:
    import robot_rl.envs  # noqa: F401
    from robot_rl.training.pretrain_encoder import PretrainConfig, pretrain_and_save

    check_output(args.out, "encoder directory", overwrite=args.overwrite)
    from robot_rl.cli.gym import adapter_config, checked_env_id, env_kwargs_arg
    from robot_rl.envs.canonical import make_canonical

    settings = parse_settings(args.set)
    if any(not key.startswith("adapter.") for key in settings):
        raise UserError(f"pretrain-encoder takes --set adapter.FIELD=VALUE only, got {sorted(settings)}")
    if args.env is None and (settings or args.obs_keys or args.episode_steps or args.action_hold_steps):
        raise UserError("--set adapter.*, --obs-keys, --episode-steps and --action-hold-steps are for an --env "
                        "environment; the arm task's frames come from its scripted expert")
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
            import gymnasium as gym

            gym.make(config.env_id, **config.env_kwargs).close()
        else:
            env = make_canonical(config.env_id, config.env_kwargs, config.adapter, normalize=False)
            env.close()
            if not env.adapter.cameras:
                raise ValueError("it has no camera frames to pretrain on (give image observations in --env-kwargs)")
    except (TypeError, ValueError) as exc:
        raise UserError(f"--env-kwargs: {config.env_id} refuses {config.env_kwargs}: {exc}") from None
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


def cmd_juggle(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from robot_rl.training.juggle import JuggleTrainConfig, evaluate_policy, summarize, train_juggling

    if args.action == "eval":
        from robot_rl.agents.ppo import DeployedPolicy

        policy = DeployedPolicy.load(args.policy)
        overrides = dict(args.plant) | ({"ball_mass": args.ball_mass} if args.ball_mass else {})
        summary = summarize(evaluate_policy(policy, args.trials, args.max_s, split=args.split, overrides=overrides,
                                            seed=args.seed))
        print(json.dumps({"split": args.split, "fixed_plant": overrides, **summary}))
        return 0
    from robot_rl.envs.quad_juggle_vec import check_plant_overrides

    check_plant_overrides(dict(args.plant))  # before anything is written
    out = Path(args.out)
    run_dir = Path(args.run_dir) if args.run_dir else out.parent / f"{out.name}-run"
    check_output(out, "policy directory", overwrite=args.overwrite)
    check_output(run_dir, "run directory", overwrite=args.overwrite)
    config = replace(JuggleTrainConfig(), num_envs=args.num_envs, iterations=args.iterations, seed=args.seed,
                     eval_every=args.eval_every,
                     device=args.device, physics=args.physics, time_budget_s=args.time_budget_min * 60.0,
                     hard_fraction=args.hard_fraction, split=args.split, overrides=dict(args.plant))
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

    run_dir = Path(args.run_dir) if args.run_dir else Path(args.out).parent / f"{Path(args.out).name}-run"
    check_output(args.out, "policy directory", overwrite=args.overwrite)
    check_output(run_dir, "run directory", overwrite=args.overwrite)
    sac = replace(CarTrainConfig().sac, **checked_fields(CarTrainConfig().sac, parse_settings(args.set), "--set "))
    config = CarTrainConfig(policy=None if args.policy == "none" else args.policy, track_seed=args.track_seed,
                            total_steps=args.steps, seed=args.seed, sac=sac, updates_per_step=args.updates_per_step,
                            device=args.device)
    trainer = CarTrainer(config, log=lambda row: print(json.dumps(row), flush=True))
    try:
        trainer.run()
        trainer.export(args.out)
        with atomic_path(run_dir, directory=True) as tmp:
            trainer.save_checkpoint(tmp)
    finally:
        trainer.close()
    print(json.dumps({"laps": len(trainer.laps), "first_lap_step": trainer.laps[0][0] if trainer.laps else None,
                      "best_lap_s": min((t for _, t in trainer.laps), default=None), "policy": args.out,
                      "checkpoint": str(run_dir / "checkpoint.pt")}))
    return 0


def plant_flag(parser: argparse.ArgumentParser, where: str) -> None:
    """`--plant NAME=VALUE` (repeatable): a quadrotor plant parameter fixed in every `where`."""
    parser.add_argument("--plant", type=name_equals_numbers, action="append", default=[], metavar="NAME=VALUE",
                        help=f"fix a plant parameter in every {where} (repeatable; names as in "
                             "sim/quad/randomization.yaml, e.g. --plant restitution=0.7 --plant action_latency_steps=2)")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser("pretrain-encoder", help="pretrain a vision encoder on simulated images: the arm task's "
                         "randomized scenes, or (--env) any MuJoCo environment under random actions")
    pre.add_argument("--out", required=True, help="output directory (weights + card.json)")
    pre.add_argument("--env", metavar="ID", help="any Gymnasium environment simulated in MuJoCo (module:Id or "
                     "namespace/Id): frames under random actions, body positions as targets (default: the arm task)")
    pre.add_argument("--obs-keys", help="--env: observation entries to use (as train --env)")
    pre.add_argument("--set", action="append", default=[], metavar="adapter.FIELD=VALUE",
                     help="--env: how its observations and actions are read (as train --env), e.g. "
                     "adapter.image_size=64")
    pre.add_argument("--episode-steps", type=at_least(1), help="--env: steps before each reset (a new scene; 20)")
    pre.add_argument("--action-hold-steps", type=at_least(1), help="--env: steps each random action is held (5)")
    pre.add_argument("--frames", type=at_least(1), default=30_000)
    pre.add_argument("--epochs", type=at_least(1), default=8)
    pre.add_argument("--seed", type=at_least(0), default=0)
    pre.add_argument("--env-kwargs", metavar="JSON", help="scene options: for the arm task over its defaults "
                     "(image_size 64, the pretrain randomization split), e.g. '{\"cube_xy_range\": 0.15}' for "
                     "arm_pick_cube_wide; for --env gymnasium.make's keyword arguments")
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
    reward_train.add_argument("--encoder", help="pretrained encoder directory (default: the shipped arm encoder)")
    reward_train.add_argument("--seed", type=at_least(0), default=0)
    overwrite_flag(reward_train, "the model directory")
    reward_eval.add_argument("--model", required=True, help="directory written by robot-rl reward train")
    reward_eval.add_argument("--wrong-goal", help="goal to score the demonstrations against for the wrong-goal mean")
    reward_eval.add_argument("--done-threshold", type=float, help="default: the model's own")
    reward.set_defaults(handler=cmd_reward)
    juggle = sub.add_parser("juggle", help="quadrotor juggling (JuggleRL): PPO training and evaluation, no ROS")
    juggle_sub = juggle.add_subparsers(dest="action", required=True)
    jtrain = juggle_sub.add_parser("train", help="train from scratch; exports the best evaluated policy")
    jtrain.add_argument("--out", required=True, help="policy directory (policy.safetensors + card.json)")
    jtrain.add_argument("--run-dir", help="checkpoints and TensorBoard (default: <out>-run)")
    jtrain.add_argument("--num-envs", type=at_least(1), default=2048)
    jtrain.add_argument("--iterations", type=at_least(1), default=1500)
    jtrain.add_argument("--time-budget-min", type=at_least(0.0, float), default=0.0, help="stop after this many minutes (0: none)")
    jtrain.add_argument("--seed", type=at_least(0), default=0)
    jtrain.add_argument("--eval-every", type=at_least(1), default=50,
                        help="evaluate (and export the policy if it is the best so far) every this many iterations")
    jtrain.add_argument("--hard-fraction", type=in_range(0.0, 1.0), default=0.0,
                        help="share of training plants from the randomization's train_hard split (every parameter "
                             "at the hard end of its training range at once)")
    jtrain.add_argument("--split", default="train", choices=["train", "train_hard", "heldout"],
                        help="randomization split to train (and evaluate while training) on; heldout trains an "
                             "oracle for it, the ceiling of a policy trained on train")
    plant_flag(jtrain, "training draw")
    overwrite_flag(jtrain, "the policy and run directories (retraining a shipped policy too)")
    jtrain.add_argument("--device", default="auto")
    jtrain.add_argument("--physics", default="auto", choices=["auto", "rollout", "warp", "mjx"],
                        help="simulation back end (auto: on a GPU MuJoCo MJX, the whole env on the device, else "
                             "MuJoCo Warp; mujoco.rollout on CPU threads)")
    jeval = juggle_sub.add_parser("eval", help="juggling trials in randomized sim; prints hits per trial (JSON)")
    jeval.add_argument("--policy", required=True)
    jeval.add_argument("--trials", type=at_least(1), default=10)
    jeval.add_argument("--max-s", type=at_least(0.02, float), default=600.0, help="simulated length limit of a trial [s]")
    jeval.add_argument("--ball-mass", type=at_least(1e-4, float), help="fix the ball mass [kg] (e.g. 0.005)")
    plant_flag(jeval, "trial")
    jeval.add_argument("--seed", type=at_least(0), default=1000)
    # the literal of training.juggle.EVAL_SPLITS: importing it here would load MuJoCo for every command
    jeval.add_argument("--split", default="eval", choices=["eval", "train_hard", "heldout"],
                       help="plants from the training ranges (eval), their hard end (train_hard) or beyond them "
                            "(heldout; sim/quad/randomization.yaml)")
    juggle.set_defaults(handler=cmd_juggle)
    car = sub.add_parser("car", help="race car (FastRLAP): IQL pretraining on prior driving, online RL, no ROS")
    car_sub = car.add_subparsers(dest="action", required=True)
    cpre = car_sub.add_parser("pretrain", help="record prior driving (if missing) and pretrain encoder + actor with IQL")
    cpre.add_argument("--out", required=True, help="frame-stack policy directory (encoder, actor, card.json)")
    cpre.add_argument("--dataset", default="runs/car_prior.zarr", help="prior driving dataset (recorded if missing)")
    cpre.add_argument("--tracks", type=at_least(1), default=24)
    cpre.add_argument("--steps-per-track", type=at_least(1), default=800)
    cpre.add_argument("--updates", type=at_least(1), default=6000)
    cpre.add_argument("--batch-size", type=at_least(1), default=256)
    cpre.add_argument("--seed", type=at_least(0), default=0)
    overwrite_flag(cpre, "the policy directory")
    cpre.add_argument("--device", default="auto")
    ctrain = car_sub.add_parser("train", help="online SAC on the held-out track with the frozen pretrained encoder")
    ctrain.add_argument("--out", required=True, help="where the trained frame-stack policy goes")
    ctrain.add_argument("--policy", default="policies/car_race_iql_64",
                        help="pretrained frame-stack policy ('none': random frozen encoder, fresh actor)")
    ctrain.add_argument("--track-seed", type=at_least(0), default=7)
    ctrain.add_argument("--steps", type=at_least(1), default=48_000)
    ctrain.add_argument("--updates-per-step", type=at_least(0.001, float), default=1.0)
    ctrain.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="SACConfig override, e.g. --set utd_ratio=2 --set num_critics=2")
    ctrain.add_argument("--seed", type=at_least(0), default=0)
    ctrain.add_argument("--run-dir", help="the agent's checkpoint (default: <out>-run)")
    overwrite_flag(ctrain, "the policy and run directories")
    ctrain.add_argument("--device", default="auto")
    car.set_defaults(handler=cmd_car)
