"""`robot-rl eval`: any saved policy, evaluated on the environment it was made for.

What it recognises at `--policy PATH`:

* a `train --env` run (or its `policy.pt`): the policy with its `EnvAdapter` (state normalisation
  included), on the Gymnasium environment it was trained on (or `--env` / `--env-kwargs`);
* a graph run (`robot-rl train`): the learner's last published policy (`policy.policy`, else its
  newest snapshot), signed with the run's key, on the task's simulated environment, judged by the
  robot's evaluator for the actor node that drove it (`robot_rl/robots/registry.py`: graph_evaluators);
* a shipped policy directory (`card.json`): judged by the evaluator of the robot that ships policies
  for its task (`shipped_policies`).

Every result is a JSON-able dict with the rule it was measured by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import yaml

from robot_rl.artifacts import load_card, load_checkpoint

ENV_POLICY = "policy.pt"
GRAPH_POLICY = "policy.policy"


def policy_kind(path: Path) -> str:
    """"env_run", "graph_run" or "shipped" for what lies at `path`; ValueError naming what was expected."""
    if path.is_file() and path.suffix == ".pt" or (path / ENV_POLICY).is_file():
        return "env_run"
    if (path / "secret.key").is_file() and ((path / GRAPH_POLICY).is_file() or any(path.glob("snapshots/*.policy"))):
        return "graph_run"
    if (path / "card.json").is_file():
        return "shipped"
    raise ValueError(f"{path}: neither a train --env run ({ENV_POLICY}), a graph run (secret.key with {GRAPH_POLICY} "
                     "or snapshots/) nor a shipped policy directory (card.json)")


def evaluate_saved(path: str | Path, *, episodes: int = 50, seed: int = 10_000, task: str | None = None,
                   env_id: str | None = None, env_kwargs: Mapping[str, Any] | None = None,
                   split: str | None = None, max_s: float | None = None) -> dict[str, Any]:
    """Evaluates the policy at `path` (see the module); `max_s` limits a trial or lap in simulated seconds where
    the robot's evaluator times them (None: its default)."""
    path = Path(path)
    kind = policy_kind(path)
    if kind == "env_run":
        return _evaluate_env_run(path if path.is_file() else path / ENV_POLICY, episodes, seed, env_id, env_kwargs)
    if env_id is not None:
        raise ValueError(f"--env applies to train --env runs; {path} is a {kind.replace('_', ' ')} (use --task)")
    if kind == "graph_run":
        return _evaluate_graph_run(path, episodes, seed, task, split or "eval", max_s)
    return _evaluate_shipped(path, episodes, seed, split, max_s)


def _evaluate_shipped(directory: Path, episodes: int, seed: int, split: str | None,
                      max_s: float | None) -> dict[str, Any]:
    from robot_rl.robots import registry

    card = directory / "card.json"
    task = load_card(card).get("task")
    evaluate = registry.shipped_policy_evaluator(task) if isinstance(task, str) else None
    if evaluate is None:
        raise ValueError(f"{card}: a policy for task {task!r}, which robot-rl eval cannot run (it runs shipped "
                         f"policies of {', '.join(registry.shipped_policy_tasks())})")
    return evaluate(directory, episodes, seed, split, max_s)


def _evaluate_env_run(file: Path, episodes: int, seed: int, env_id: str | None,
                      env_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    from robot_rl.agents.policy import Policy, PolicySpec
    from robot_rl.envs.adapter import AdapterMismatch, EnvAdapter, make_canonical
    from robot_rl.envs.env_kwargs import env_signature

    saved = load_checkpoint(file)
    if "adapter" not in saved:
        raise ValueError(f"{file} was saved before policies carried their environment adapter; retrain it")
    policy = Policy(PolicySpec.from_json(saved["spec"]), saved["weights"])
    adapter = EnvAdapter.from_json(saved["adapter"])
    env_id = env_id or saved["env_id"]
    kwargs = {**saved.get("env_kwargs", {}), **(env_kwargs or {})}
    try:
        env = make_canonical(env_id, kwargs, adapter=adapter, normalize=True)
    except AdapterMismatch as exc:
        # the usual cause: the environment gained an option since the policy was saved, whose default changes a space
        others = [name for name in env_signature(env_id) if name not in kwargs]
        raise ValueError(f"{file}: {exc}. The policy was saved for {env_id} with env_kwargs {kwargs}; build the "
                         f"environment it was trained in with --env-kwargs (it also takes: {', '.join(others)})"
                         ) from None
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
    """The parameters node `name` ran with in graph run `run` (params.yaml: "/NAME", or a fleet's
    "/robot0/NAME", the first robot's); {} when it did not run."""
    path = run / "params.yaml"
    params = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return next((section.get("ros__parameters", {}) for key, section in params.items()
                 if key.rsplit("/", 1)[-1] == name and isinstance(section, dict)), {})


def env_accepts(env_id: str, name: str) -> bool:
    """Whether the environment registered as `env_id` takes keyword argument `name`."""
    from robot_rl.envs.env_kwargs import env_signature

    return name in env_signature(env_id)


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
    graph's actor builds it: an environment graph's episodes (reset seeds from `seed`) through the adapter its
    nodes used; a robot's task by that robot's evaluator for the task's actor node (`max_s`: its limit on a
    trial or lap). `max_failures`: episodes stop early as `evaluate_policy`'s do."""
    from robot_rl.robots import registry
    from robot_rl.tasks import ENV_TASK, EnvTaskFile, get_task
    from robot_rl.training.env_graph import ENV_TASK_FILE

    env_task = str(run / ENV_TASK_FILE) if task_name == ENV_TASK else ""
    task = get_task(task_name, env_task)
    evaluate = None if env_task else registry.graph_evaluator(task.actor_node)
    if not env_task and evaluate is None:
        raise ValueError(f"robot-rl eval cannot judge {task.name} in simulation: no robot evaluates graph runs "
                         f"driven by {task.actor_node or 'its actor'}")
    policy, payload = graph_policy(run, source, task)
    pinned = {"policy": str(source), "kind": "graph_run", "task": task.name, "policy_version": payload.meta["version"],
              "transitions": payload.meta.get("transitions")}
    if evaluate is not None:
        return {**pinned, **evaluate(run, policy, task, episodes, seed, split, max_s, max_failures)}
    # the environment through the adapter the run's nodes used, its normalisation included
    from robot_rl.envs.adapter import make_canonical

    described = EnvTaskFile.load(env_task)
    env = make_canonical(described.env_id, described.env_kwargs, adapter=described.make_adapter())
    result = evaluate_policy(lambda obs, info: policy.act(obs, True), env, episodes, seed, max_failures)
    return {**pinned, "env_id": described.env_id, "env_kwargs": described.env_kwargs, "episodes": episodes,
            **result, "rule": "deterministic policy; success = the environment's success flag at any step"}


def graph_policy(run: Path, source: Path, task) -> tuple[Any, Any]:
    """The policy of payload `source` (graph run `run`'s policy.policy or a snapshot), checked against the run's
    secret, for `task`; and the payload (its meta names the version). ValueError if forged or malformed."""
    from robot_rl.training.policy_payload import policy_from_payload
    from robot_rl.transport import codec
    from robot_rl.transport.secret import read_secret

    payload = codec.decode(Path(source).read_bytes(), expect_kind="policy", key=read_secret(run / "secret.key"))
    return policy_from_payload(payload, task), payload


def evaluate_policy(act: Callable[[Any, Mapping], np.ndarray], env, episodes: int, seed: int,
                    max_failures: int | None = None) -> dict[str, Any]:
    """Deterministic episodes of `act(observation, info)` on the Gymnasium `env`, which it closes, the reset
    seeds drawn from `seed`: success rate (info's is_success at any step), mean return, each episode's result.

    `max_failures`: stop once more episodes than this have failed (a policy judged against a threshold that
    allows that many has missed it whatever the rest would do); the success rate is then None and
    `success_at_most` bounds it."""
    from robot_rl.envs.adapter import seeded_reset

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
        # Right after this env rendered, while its own GL context is current: MuJoCo before 4.0 (gym-hil's venv)
        # frees a closed renderer's GL objects in the current context, corrupting another live env's pictures.
        env.close()
    return {"success_rate": float(np.mean([r["success"] for r in results])),
            "mean_return": float(np.mean([r["return"] for r in results])), "results": results}


def fleet_evaluation(paths: list[Path]) -> dict:
    """One evaluation of a fleet's run from each robot's eval.json: episodes and steps summed, success
    and return over all episodes, every robot's own result under `robots`."""
    robots = {path.parent.name: json.loads(path.read_text()) for path in paths}
    episodes = sum(r["episodes"] for r in robots.values())

    def over_episodes(key: str) -> float:
        return sum(r[key] * r["episodes"] for r in robots.values()) / max(episodes, 1)

    return {"episodes": episodes, "success_rate": over_episodes("success_rate"),
            "mean_return": over_episodes("mean_return"),
            "train_steps": sum(r["train_steps"] for r in robots.values()),
            "policy_version": min(r["policy_version"] for r in robots.values()),
            "transitions_sent": sum(r["transitions_sent"] for r in robots.values()),
            "transitions_acked_all": all(r["transitions_acked_all"] for r in robots.values()),
            "unacked_payloads": sum(r["unacked_payloads"] for r in robots.values()),
            **{key: max((r[key] for r in robots.values() if isinstance(r.get(key), float)), default="-")
               for key in ("act_latency_ms_p99", "control_ms_p99", "learner_wait_ms_p99")},
            "missed_periods": sum(r.get("missed_periods", 0) for r in robots.values()), "robots": robots}
