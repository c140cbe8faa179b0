"""`robot-rl eval`: any saved policy, evaluated on the environment it was made for.

What it recognises at `--policy PATH`:

* a `train --env` run (or its `policy.pt`): the policy with its `EnvAdapter` (state normalisation
  included), on the Gymnasium environment it was trained on (or `--env` / `--env-kwargs`);
* a graph run (`robot-rl train`): the learner's last published policy (`policy.policy`, else its
  newest snapshot), signed with the run's key, on the task's simulated environment, each
  observation built as the graph's actor builds it (the car: timed laps, as its shipped policy);
* a shipped policy directory: the juggling PPO policy (`card.json` task quad_juggle: juggling
  trials) or the car's frame-stack policy (task car_race: one timed lap per randomization draw).

Every result is a JSON-able dict with the rule it was measured by.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import yaml

ENV_POLICY = "policy.pt"
GRAPH_POLICY = "policy.policy"


def policy_kind(path: Path) -> str:
    """"env_run", "graph_run", "juggle" or "car" for what lies at `path`; ValueError naming what was expected."""
    if path.is_file() and path.suffix == ".pt" or (path / ENV_POLICY).is_file():
        return "env_run"
    if (path / "secret.key").is_file() and ((path / GRAPH_POLICY).is_file() or any(path.glob("snapshots/*.policy"))):
        return "graph_run"
    card = path / "card.json"
    if card.is_file():
        task = json.loads(card.read_text()).get("task")
        if task in ("quad_juggle", "car_race"):
            return "juggle" if task == "quad_juggle" else "car"
        raise ValueError(f"{card}: a policy for task {task!r}, which robot-rl eval cannot run")
    raise ValueError(f"{path}: neither a train --env run ({ENV_POLICY}), a graph run (secret.key with {GRAPH_POLICY} "
                     "or snapshots/) nor a shipped policy directory (card.json)")


def evaluate_saved(path: str | Path, *, episodes: int = 50, seed: int = 10_000, task: str | None = None,
                   env_id: str | None = None, env_kwargs: Mapping[str, Any] | None = None,
                   split: str | None = None, max_s: float | None = None) -> dict[str, Any]:
    """Evaluates the policy at `path` (see the module); `max_s` limits a juggling trial (default 600 s) or a
    car's lap (default 90 s) in simulated seconds."""
    path = Path(path)
    kind = policy_kind(path)
    if kind == "env_run":
        return _evaluate_env_run(path if path.is_file() else path / ENV_POLICY, episodes, seed, env_id, env_kwargs)
    if env_id is not None:
        raise ValueError(f"--env applies to train --env runs; {path} is a {kind.replace('_', ' ')} (use --task)")
    if kind == "graph_run":
        return _evaluate_graph_run(path, episodes, seed, task, split or "eval", max_s)
    if kind == "juggle":
        return _evaluate_juggle(path, episodes, seed, split or "eval", max_s or 600.0)
    return _evaluate_car(path, episodes, seed, split or "eval", max_s or 90.0)


def _evaluate_env_run(file: Path, episodes: int, seed: int, env_id: str | None,
                      env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    import torch

    from robot_rl.agents.policy import Policy, PolicySpec
    from robot_rl.envs.canonical import EnvAdapter, make_canonical

    saved = torch.load(file, weights_only=True, map_location="cpu")
    if "adapter" not in saved:
        raise ValueError(f"{file} was saved before policies carried their environment adapter; retrain it")
    policy = Policy(PolicySpec.from_json(saved["spec"]), saved["weights"])
    adapter = EnvAdapter.from_json(saved["adapter"])
    env_id = env_id or saved["env_id"]
    kwargs = {**saved.get("env_kwargs", {}), **(env_kwargs or {})}
    env = make_canonical(env_id, kwargs, adapter=adapter, normalize=True)
    result = evaluate_policy(lambda obs, info: policy.act(obs, deterministic=True), env, episodes, seed)
    return {"policy": str(file), "kind": "env_run", "env_id": env_id, "env_kwargs": kwargs, "episodes": episodes,
            "rule": "deterministic policy; success = the environment's success flag at any step", **result}


def _graph_task(run: Path, task: str | None) -> str:
    params = run / "params.yaml"
    found = None
    if params.is_file():
        nodes = yaml.safe_load(params.read_text()) or {}
        found = next((section["ros__parameters"]["task"] for section in nodes.values()
                      if isinstance(section, dict) and "task" in section.get("ros__parameters", {})), None)
    if task is not None and found is not None and task != found:
        raise ValueError(f"{run} trained task {found!r}, not {task!r}")
    if task is None and found is None:
        raise ValueError(f"{run}: no params.yaml naming the task; pass --task")
    return task or found


def node_params(run: Path, name: str) -> dict[str, Any]:
    """The parameters node `name` ran with in graph run `run` (params.yaml: "/car_sim", or a fleet's
    "/robot0/car_sim", the first robot's); {} when it did not run."""
    path = run / "params.yaml"
    params = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return next((section.get("ros__parameters", {}) for key, section in params.items()
                 if key.rsplit("/", 1)[-1] == name and isinstance(section, dict)), {})


def _has_parameter(env_id: str, name: str) -> bool:
    import gymnasium as gym

    creator = gym.spec(env_id).entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    return name in inspect.signature(creator).parameters


def _evaluate_graph_run(run: Path, episodes: int, seed: int, task_name: str | None, split: str,
                        max_s: float | None) -> dict[str, Any]:
    source = run / GRAPH_POLICY
    if not source.is_file():
        source = sorted((run / "snapshots").glob("*.policy"))[-1]
    return evaluate_graph_policy(run, source, _graph_task(run, task_name), episodes, seed, split, max_s)


def evaluate_graph_policy(run: Path, source: Path, task_name: str, episodes: int = 50, seed: int = 10_000,
                          split: str = "eval", max_s: float | None = None,
                          max_failures: int | None = None) -> dict[str, Any]:
    """A policy payload of graph run `run` (`source`: its policy.policy or a snapshot, signed with the run's
    key) on the task's simulated environment in randomization split `split`, each observation built as the
    graph's actor builds it: an arm task's deterministic episodes whose reset seeds come from `seed`; the
    car's timed laps, one per draw `seed`, `seed + 1`, ... (`max_s`, default 90 s, to make a lap).
    `max_failures`: an environment run's episodes stop early as `evaluate_policy`'s do."""
    import gymnasium as gym

    import robot_rl.envs  # noqa: F401 - registers the environments
    from robot_rl.tasks import ENV_TASK, EnvTaskFile, get_task
    from robot_rl.training.actor import policy_from_payload
    from robot_rl.training.env_graph import ENV_TASK_FILE
    from robot_rl.transport import codec
    from robot_rl.transport.secret import read_secret

    env_task = str(run / ENV_TASK_FILE) if task_name == ENV_TASK else ""
    task = get_task(task_name, env_task)
    if task.actor_node not in ("arm_actor", "car_actor", "env_actor"):
        raise ValueError(f"robot-rl eval runs arm, car and environment graph runs; {task.name} is driven by "
                         f"{task.actor_node}")
    payload = codec.decode(Path(source).read_bytes(), expect_kind="policy", key=read_secret(run / "secret.key"))
    policy = policy_from_payload(payload, task)
    pinned = {"policy": str(source), "kind": "graph_run", "task": task.name, "policy_version": payload.meta["version"],
              "transitions": payload.meta.get("transitions")}
    if env_task:  # the environment through the adapter the run's nodes used, its normalisation included
        from robot_rl.envs.canonical import make_canonical

        described = EnvTaskFile.load(env_task)
        env = make_canonical(described.env_id, described.env_kwargs, adapter=described.make_adapter())
        result = evaluate_policy(lambda obs, info: policy.act(obs, True), env, episodes, seed, max_failures)
        return {**pinned, "env_id": described.env_id, "env_kwargs": described.env_kwargs, "episodes": episodes,
                **result, "rule": "deterministic policy; success = the environment's success flag at any step"}
    if task.actor_node == "car_actor":
        return {**pinned, **_graph_car_laps(run, policy, task, episodes, seed, split, max_s or 90.0)}
    kwargs: dict[str, Any] = {"image_size": task.image_size} if task.cameras else {}
    if _has_parameter(task.env_id, "randomization_split"):
        kwargs["randomization_split"] = split
    sim = node_params(run, "arm_sim")
    if "cube_xy_range" in sim and _has_parameter(task.env_id, "cube_xy_range"):  # the scenes it trained in
        kwargs["cube_xy_range"] = float(sim["cube_xy_range"])
    result = evaluate_policy(lambda obs, info: policy.act(actor_view(obs, info, task), True),
                             gym.make(task.env_id, **kwargs), episodes, seed)
    return {**pinned, "env_id": task.env_id, "env_kwargs": kwargs, "episodes": episodes, **result,
            "rule": "deterministic policy; success = the environment's success flag at any step"}


def evaluate_policy(act: Callable[[Any, Mapping], np.ndarray], env, episodes: int, seed: int,
                    max_failures: int | None = None) -> dict[str, Any]:
    """Deterministic episodes of `act(observation, info)` on the Gymnasium `env`, which it closes, the reset
    seeds drawn from `seed`: success rate (info's is_success at any step), mean return, each episode's result.

    `max_failures`: stop once more episodes than this have failed (a policy judged against a threshold that
    allows that many has missed it whatever the rest would do); the success rate is then None and
    `success_at_most` bounds it."""
    from robot_rl.envs.canonical import seeded_reset

    rng = np.random.default_rng(seed)
    results = []
    try:
        for _ in range(episodes):
            obs, info = seeded_reset(env, int(rng.integers(2**31)))  # NumPy's global generator too: gym-hil's cube
            done, success, total, steps = False, False, 0.0, 0
            while not done:
                obs, reward, terminated, truncated, info = env.step(act(obs, info))
                total, steps = total + float(reward), steps + 1
                success = success or bool(info.get("is_success", False))
                done = terminated or truncated
            results.append({"success": success, "return": total, "steps": steps})
            failures = sum(not r["success"] for r in results)
            if max_failures is not None and failures > max_failures:
                return {"success_rate": None, "success_at_most": (episodes - failures) / episodes,
                        "stopped_after": len(results), "results": results}
    finally:
        env.close()
    return {"success_rate": float(np.mean([r["success"] for r in results])),
            "mean_return": float(np.mean([r["return"] for r in results])), "results": results}


def actor_view(obs, info: Mapping, task) -> Any:
    """The simulated env's observation as the graph's actor builds it from the robot's topics: a flat task's
    vector as it is (the env builds it with `task.observation`); a camera task's frames as they are, with the
    gripper entry from the fingers' opening (there is no gripper command topic) and the rest (noise
    included) as is."""
    if not task.cameras:
        return obs
    state = np.array(obs["state"], dtype=np.float32)
    state[-1] = task.observation(info["state"])[-1]
    return {**obs, "state": state}


def _evaluate_juggle(directory: Path, trials: int, seed: int, split: str, max_s: float) -> dict[str, Any]:
    from robot_rl.agents.ppo import DeployedPolicy
    from robot_rl.training.juggle import EVAL_SPLITS, summarize
    from robot_rl.training.juggle import evaluate_policy as juggling_trials

    if split not in EVAL_SPLITS:
        raise ValueError(f"juggling evaluates on the {', '.join(EVAL_SPLITS)} split, not {split!r}")
    policy = DeployedPolicy.load(directory)
    summary = summarize(juggling_trials(policy, trials, max_s, split=split, seed=seed))
    return {"policy": str(directory), "kind": "juggle", "split": split, **summary,
            "rule": f"JuggleRL's true hits per trial (simulated), each trial until the ball drops or {max_s:g} s"}


def _evaluate_car(directory: Path, laps: int, seed: int, split: str, max_s: float) -> dict[str, Any]:
    from robot_rl.agents.frame_stack_policy import load_frame_stack_policy
    from robot_rl.training.car_race import CarTrainConfig

    policy = load_frame_stack_policy(directory)
    config = CarTrainConfig()
    return {"policy": str(directory), "kind": "car",
            **car_laps(policy, lambda observation: policy.act(observation, deterministic=True), laps, seed, split,
                       max_s, track_seed=config.track_seed, boundary=config.boundary,
                       action_rate_limit=config.sac.action_rate_limit)}


def _graph_car_laps(run: Path, policy, task, laps: int, seed: int, split: str, max_s: float) -> dict[str, Any]:
    """A graph run's car policy (over the frozen encoder features car_actor streams) timed on the track and
    with the encoder its car_sim and car_actor ran (params.yaml)."""
    from robot_rl.agents.frame_stack_policy import load_frame_stack_policy

    sim, actor = node_params(run, "car_sim"), node_params(run, "car_actor")
    if "policy_dir" not in actor or "track_seed" not in sim:
        raise ValueError(f"{run / 'params.yaml'} names no car_actor.policy_dir or car_sim.track_seed")
    frames = load_frame_stack_policy(actor["policy_dir"])
    return car_laps(frames, lambda observation: policy.act(observation, True), laps, seed, split, max_s,
                    track_seed=int(sim["track_seed"]), boundary=sim.get("boundary", "walls"),
                    action_rate_limit=task.action_rate_limit)


def car_laps(frames, act: Callable[[np.ndarray], np.ndarray], laps: int, seed: int, split: str, max_s: float, *,
             track_seed: int, boundary: str, action_rate_limit: float) -> dict[str, Any]:
    """One timed lap per randomization draw (reset seeds `seed`, `seed + 1`, ...) of `act` on the car_race
    task's observation: the newest camera frame through the frozen encoder of frame-stack policy `frames`,
    stacked, with the proprioception, as car_actor builds it."""
    from robot_rl.agents.frame_stack_policy import FeatureStack
    from robot_rl.envs.car_race import CarRaceEnv
    from robot_rl.training.car_race import lap_time_median, timed_laps

    env = CarRaceEnv(track_seed=track_seed, boundary=boundary, image_size=frames.image_size,
                     frame_stack=frames.frame_stack, randomization_split=split, action_rate_limit=action_rate_limit)
    stack = FeatureStack(frames.frame_stack)

    def drive(obs: dict, first: bool) -> np.ndarray:
        if first:
            stack.reset()
        stack.push(frames.encode(obs["frames"][-1]))
        return act(frames.observation(stack.flat(), obs["state"]))

    try:
        times = timed_laps(env, drive, [seed + i for i in range(laps)], max_s)
    finally:
        env.close()
    median = lap_time_median(times)
    return {"split": split, "track_seed": track_seed, "laps": laps, "clean_laps": sum(t is not None for t in times),
            "lap_times_s": [None if t is None else round(t, 3) for t in times],
            "median_lap_s": round(median, 3) if np.isfinite(median) else None,
            "rule": "one timed lap per randomization draw from the start line; a crash, a stuck car or "
            f"{max_s:g} s without a lap is a failed lap (infinitely slow in the median)"}
