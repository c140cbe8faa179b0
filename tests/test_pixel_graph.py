"""The pixel pick-cube task through the node graph: sim publishing cameras, actor sending frames,
learner encoding them with a frozen encoder, policy with the encoder back to the actor."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

from robot_rl.agents.encoders import EncoderConfig, ImageEncoder, save_pretrained  # noqa: E402
from robot_rl.ros.probe import fresh_domain_id  # noqa: E402


def test_pixel_pick_cube_trains_and_evaluates_through_ros(tmp_path):
    encoder_dir = tmp_path / "encoder"
    save_pretrained(ImageEncoder(EncoderConfig(cameras=("front", "wrist"), image_size=64, latent_dim=16)),
                    encoder_dir, {"name": "random test encoder"})
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli", "train", "--task", "arm_pick_cube", "--run-dir", str(run_dir),
         "--steps", "200", "--eval-episodes", "2", "--plain", "--status-period", "5",
         "--domain-id", str(fresh_domain_id()),
         "--set", "robot_rl.demos={episodes: 2, noise: 0.1, seed: 1}", "--set", f"learner.encoder={encoder_dir}",
         "--set", "learner.warmup_transitions=60", "--set", "learner.batch_size=32",
         "--set", "learner.hidden_dims=[64, 64]", "--set", "arm_actor.sync_slack_steps=120",
         # eager: compiling the shipped compiled step (same math: tests/test_sac.py) would take 10-50 s of CI's CPU
         "--set", "learner.compile=false"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["episodes"] == 2 and result["train_steps"] >= 200 and result["transitions_acked_all"]
    summary = json.loads((run_dir / "learner_summary.json").read_text())
    assert summary["updates"] > 50 and summary["demo_size"] > 0 and summary["rejected"] == 0
    assert summary["online_size"] >= 200


def test_a_lockstep_actor_that_would_deadlock_with_the_warm_up_is_refused():
    from robot_rl.ros.graph import build_graph, config_path, load_config

    config = load_config(config_path("arm_pick_cube"))
    warmup = config["learner"]["ros__parameters"]["warmup_transitions"]
    config["arm_actor"]["ros__parameters"]["sync_slack_steps"] = warmup - 1
    with pytest.raises(ValueError, match="sync_slack_steps"):
        build_graph(config)


def test_a_lockstep_learner_makes_the_actors_ratio_and_a_wall_clock_one_trains_up_to_its_own_cap():
    from robot_rl.ros.graph import apply_overrides, build_graph, config_path, load_config

    def learner_cap(overrides):
        config = apply_overrides(load_config(config_path("arm_pick_cube")), overrides)
        return next(s for s in build_graph(config) if s.name == "learner").parameters["max_update_ratio"]

    assert learner_cap({}) == 1.0  # lockstep as shipped: exactly the actor's 1 update per step
    assert learner_cap({"arm_actor.sync_updates_per_step": 2.0}) == 2.0
    assert learner_cap({"arm_sim.clock_mode": "realtime", "arm_actor.sync_updates_per_step": 0.0}) == 8.0


def test_recorded_episodes_load_as_pixel_demonstrations(tmp_path):
    import numpy as np

    from robot_rl.data.episodes import EpisodeSchema, EpisodeWriter
    from robot_rl.nodes.learner import demonstration_arrays
    from robot_rl.tasks import get_task
    from robot_rl.training.learner import LearnerConfig, LearnerCore

    task = get_task("arm_pick_cube")
    writer = EpisodeWriter(tmp_path / "rec.zarr", EpisodeSchema(task.frame_shapes, task.obs_dim, task.action_dim),
                           {"task": task.name})
    rng = np.random.default_rng(0)

    def obs(t):
        return {**{c: np.full(s, t, np.uint8) for c, s in task.frame_shapes.items()},
                "state": np.full(task.obs_dim, t, np.float32)}

    for t in range(3):
        writer.add_step(obs(t), rng.uniform(-1, 1, 4).astype(np.float32), 0.0, False, False, t == 1, None, float(t))
    writer.end_episode(obs(3))
    arrays = demonstration_arrays(str(tmp_path / "rec.zarr"), task)
    assert arrays["obs_front"].shape == (3, 64, 64, 3) and arrays["next_obs_wrist"][2, 0, 0, 0] == 3
    np.testing.assert_array_equal(arrays["intervention"], [False, True, False])
    encoder_dir = tmp_path / "encoder"
    save_pretrained(ImageEncoder(EncoderConfig(cameras=("front", "wrist"), image_size=64, latent_dim=4)),
                    encoder_dir, {"name": "test"})
    core = LearnerCore(LearnerConfig(task.obs_dim, task.action_dim, cameras=task.cameras, image_size=64,
                                     encoder=str(encoder_dir)), tmp_path / "run")
    assert core.load_demonstrations(arrays) == 3
    assert core.demos.storage["obs"].shape[1] == 2 * 4 + task.obs_dim  # features + proprioception
    views = LearnerCore(LearnerConfig(task.obs_dim, task.action_dim, cameras=task.cameras, image_size=64,
                                      encoder=str(encoder_dir), feature_views=3), tmp_path / "run3")
    assert views.load_demonstrations(arrays) == 3
    stored = views.demos.storage["obs"][:3]
    np.testing.assert_allclose(stored[:, :2 * 4 + task.obs_dim], core.demos.storage["obs"][:3], rtol=1e-5, atol=1e-6)
    assert stored.shape[1] == 3 * (2 * 4 + task.obs_dim) and views.core.batch()["obs"].shape[1] == 2 * 4 + task.obs_dim
    with pytest.raises(ValueError, match="feature_views=2 needs a frozen image encoder"):
        LearnerCore(LearnerConfig(3, 2, feature_views=2), tmp_path / "run_state")
    with pytest.raises(ValueError, match="arm_lift"):
        demonstration_arrays(str(tmp_path / "rec.zarr"), get_task("arm_lift"))


def test_a_learner_without_a_pretrained_encoder_trains_one_from_the_frames(tmp_path):
    """No learner.encoder on a pixel task: the frames go to the frame memory (each stored once per stream), the
    critic trains a conv encoder (DrQ), the policy it publishes carries it, and a restart replays the journal."""
    import numpy as np

    from robot_rl.agents.sac import SACConfig
    from robot_rl.data.frames import FrameReplayBuffer
    from robot_rl.training.learner import LearnerConfig, LearnerCore
    from robot_rl.transport import codec
    from robot_rl.transport.kinds import TRANSITIONS
    from robot_rl.transport.layout import stack_transitions

    shapes = {"front": (16, 16, 3), "wrist": (16, 16, 3)}
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (6, 16, 16, 3), np.uint8)  # one episode's 6 observations, both cameras alike

    def episode(steps: int) -> dict:
        fields = {"obs": [[t, 0.0] for t in range(steps)], "next_obs": [[t + 1, 0.0] for t in range(steps)],
                  "action": rng.uniform(-1, 1, (steps, 2)), "reward": [0.0] * steps,
                  "terminated": [t == steps - 1 for t in range(steps)], "truncated": [False] * steps,
                  "intervention": [t == 1 for t in range(steps)]}
        for camera in shapes:
            fields[f"obs_{camera}"], fields[f"next_obs_{camera}"] = frames[:steps], frames[1:steps + 1]
        return stack_transitions(fields, 2, 2, shapes)

    config = LearnerConfig(2, 2, SACConfig(batch_size=4, hidden_dims=(16, 16)), cameras=tuple(shapes), image_size=16,
                           warmup_transitions=2)
    core = LearnerCore(config, tmp_path / "run")
    assert isinstance(core.online, FrameReplayBuffer) and core.agent.encoder is not None
    assert core.load_demonstrations(episode(5)) == 5
    assert len(core.demos) == 5 and core.demos.slots_written == 6  # 5 transitions, 6 observations: each once
    payload = codec.encode(TRANSITIONS, episode(5), {"actor_id": "robot0", "seq": 0})
    assert core.ingest(payload).transitions == 5
    assert len(core.online) == 5 and core.online.slots_written == 6 and len(core.demos) == 6  # + the correction
    encoder_before = {k: v.clone() for k, v in core.agent.encoder.state_dict().items()}
    core.train_step()
    assert any(not np.array_equal(v.numpy(), encoder_before[k].numpy())
               for k, v in core.agent.encoder.state_dict().items())  # the critic's loss trains the encoder
    policy = codec.decode(core.policy_payload(), expect_kind="policy")
    assert any(name.startswith("encoder.") for name in policy.arrays)  # the actor gets the encoder it acts with
    core.save_checkpoint()
    core.close()
    restarted = LearnerCore(config, tmp_path / "run")
    assert restarted.restore() and len(restarted.online) == 5 and restarted.online.slots_written == 6
    assert restarted.ingest(payload).duplicate  # a resend after the restart is recognised
    with pytest.raises(ValueError, match="feature_views=4 needs a frozen image encoder"):
        LearnerCore(LearnerConfig(2, 2, cameras=tuple(shapes), image_size=16, feature_views=4), tmp_path / "views")
