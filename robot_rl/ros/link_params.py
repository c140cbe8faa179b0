"""The parameters both actor nodes (`arm_actor`, `car_actor`) declare for their link to the learner
(`LearnerLink`, the outbox, the run's secret) and for the process they run in; their other shared
settings are ActorConfig's fields."""

from __future__ import annotations

from robot_rl.ros.node_utils import TORCH_THREADS, Param

LINK_PARAMS = [
    Param("key_file", "", "The run's secret that signs transition batches ('': <run_dir>/secret.key, created if "
          "absent); an actor on another machine than the learner needs a copy of the learner's."),
    Param("send_period_s", 0.05, "Period of the outbox (re)send check.", 0.001, 10.0),
    Param("resend_after_s", 2.0, "Resend a batch not acknowledged within this time.", 0.05, 600.0),
    Param("drain_timeout_s", 60.0, "After evaluation, wait this long for the learner to acknowledge.", 0.0, 3600.0),
    TORCH_THREADS,
]
