"""The juggling training of benchmarks/gpu_run.sh: `robot-rl juggle train`'s run (JuggleTrainConfig's defaults,
the policy class policies/quad_juggle ships) without the command line, which imports ROS.

    python benchmarks/gpu_train.py DEVICE NUM_ENVS ITERATIONS TIME_BUDGET_S OUT_DIR
"""

import sys
from dataclasses import replace
from pathlib import Path

from robot_rl.robots.quad.train import JuggleTrainConfig, train_juggling

device, num_envs, iterations, budget_s, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), \
    Path(sys.argv[5])
config = replace(JuggleTrainConfig(), device=device, physics="mjx", num_envs=num_envs, iterations=iterations,
                 time_budget_s=budget_s, eval_every=20)
card = train_juggling(config, out / "quad_juggle_gpu", out / "quad_juggle_gpu-run")
print({key: card.get(key) for key in ("iteration", "env_steps", "wall_clock_s", "evaluation_during_training")})
