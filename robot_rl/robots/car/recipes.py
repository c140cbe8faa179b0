"""The car's `robot-rl` recipes without ROS: `car pretrain` (IQL on prior driving, FastRLAP's offline stage)
and `car train` (online SAC on the held-out track with the frozen pretrained encoder)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.arguments import at_least, overwrite_flag, parse_settings
from robot_rl.config_fields import checked_fields
from robot_rl.outputs import atomic_path, check_output


def cmd_car(args: argparse.Namespace) -> int:
    from dataclasses import replace

    if args.action == "pretrain":
        from robot_rl.agents.iql import IQLConfig
        from robot_rl.robots.car.pretrain import CarPretrainConfig, pretrain_car

        check_output(args.out, "policy directory", overwrite=args.overwrite)
        config = CarPretrainConfig(dataset=args.dataset, tracks=args.tracks, steps_per_track=args.steps_per_track,
                                   updates=args.updates, iql=replace(IQLConfig(), batch_size=args.batch_size),
                                   seed=args.seed, device=args.device)
        card = pretrain_car(config, args.out, log=lambda row: print(json.dumps(row), flush=True))
        print(json.dumps(card["final_metrics"]))
        return 0
    from robot_rl.robots.car.train import CarTrainConfig, CarTrainer

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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    car = sub.add_parser("car", help="race car (FastRLAP): IQL pretraining on prior driving, online RL, no ROS")
    car_sub = car.add_subparsers(dest="action", required=True)
    cpre = car_sub.add_parser("pretrain",
                              help="record prior driving (if missing) and pretrain encoder + actor with IQL")
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
