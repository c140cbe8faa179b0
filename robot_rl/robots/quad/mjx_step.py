"""The jitted policy step of :class:`~robot_rl.robots.quad.mjx.MJXJuggleEnv`: latency queue ->
10 substeps of (rate controller, mixer, motor model, MJX step) -> measured ball -> task -> resets of
the finished pairs -> observations, all JAX.

The ball meets the racket through :func:`sphere_cylinder`, an exact sphere-cylinder contact installed in
MJX's collider table in place of its iterative SDF one (MJX 3.17 marks that one "TODO: implement
analytical version"): with the racket tilted 1 degree, the SDF contact's normal sent a 3 m/s ball off
at (-0.07, -0.01) m/s sideways where CPU MuJoCo and geometry give (+0.04, -0.10).

The task is :class:`~robot_rl.robots.quad.juggling.JuggleTask`'s and the episode logic
:class:`~robot_rl.robots.quad.vec_env.JuggleCore`'s, written as pure functions over the
:class:`EnvState` pytree (JAX arrays are immutable; those classes update numpy buffers in place);
``tests/test_quad_juggle_mjx.py`` holds each function to its numpy counterpart on the same states.
Resets are selections: every step draws fresh plants and start states for every pair and keeps
them where an episode ended, which costs little beside ten physics steps and keeps shapes static.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from robot_rl.robots.quad.control import CTBR_MAX_RATE, CTBR_THRUST_RANGE
from robot_rl.robots.quad.juggling import JuggleConfig

__all__ = ["EnvState", "JuggleSpec", "StepFunctions", "StepOut", "TaskState", "build_step_functions",
           "LOG_KEYS"]

LOG_KEYS = ("hit", "apex", "track", "smooth", "position", "height", "yaw", "rates", "termination")
"""Reward terms, in :meth:`JuggleTask.reward_terms`'s order (the log's ``Reward/<term>``)."""


@dataclass(frozen=True)
class JuggleSpec:
    """Static facts of the scene the jitted functions close over."""

    n: int
    n_substeps: int
    dt: float
    ids: dict
    qq: int
    qv: int
    bq: int
    bv: int
    act: tuple[int, int]
    queue_len: int
    hover_action: float
    contact_frequency: float
    restitution_grid: np.ndarray
    restitution_damping: np.ndarray
    ball_radius: float
    controller: Any  # ControllerConstants


class TaskState(NamedTuple):
    """:class:`~robot_rl.robots.quad.juggling.JuggleTask`'s bookkeeping, per pair."""

    steps: Any
    hits: Any
    contacts: Any
    since_hit: Any
    since_contact: Any
    awaiting_apex: Any
    apex_sum: Any
    apex_above_contact_sum: Any
    contact_z: Any
    apexes: Any
    actions: Any  # (N, 2, 4), newest first
    prev_ball_vel: Any
    prev_ball_in_zone: Any
    ret: Any


class EnvState(NamedTuple):
    data: Any  # mjx.Data, batched over pairs
    controller: Any  # ControllerState
    task: TaskState
    plant: dict  # NOMINAL_PLANT name -> (N,) or (N, 3)
    fields: dict  # per-pair model fields: body_mass, body_inertia, pair_solref
    queue: Any  # (N, queue_len, 4) actions awaiting execution, newest first
    ball_pos_measured: Any
    ball_vel_measured: Any
    key: Any


class StepOut(NamedTuple):
    reward: Any  # (N,) float32
    terminated: Any  # (N,) bool
    truncated: Any  # (N,) bool
    hit: Any  # (N,) bool: a counted hit in this step
    log: Any  # (len(LOG_KEYS) + 6,): the terms' means, then the ended episodes' count and sums of hits,
    #          steps, apex heights, ball-lost and crash endings


class StepFunctions(NamedTuple):
    reset_all: Callable  # key -> (state, (policy obs, critic obs))
    step: Callable  # (state, actions) -> (state, StepOut, (policy obs, critic obs))
    raw_step: Callable  # (fields, data, ctrl) -> data after n_substeps MJX steps (the reference)


def build_step_functions(model, spec: JuggleSpec, config: JuggleConfig, draws) -> StepFunctions:
    """Jitted functions of one scene, task and plant distribution (``draws``: ``_PlantDraws``)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    from robot_rl.robots.quad.control_jax import ControllerState, controller_reset, controller_step

    install_sphere_cylinder()
    cfg, n = config, spec.n
    home = jnp.asarray(cfg.home, jnp.float32)
    min_hit_steps = int(round(cfg.min_hit_interval_s * cfg.policy_hz))
    cos_tilt = float(np.cos(np.radians(cfg.max_tilt_deg)))
    quad, ball, pair = spec.ids["quad"], spec.ids["ball"], spec.ids["pair"]
    qq, qv, bq, bv = spec.qq, spec.qv, spec.bq, spec.bv
    grid, damping = jnp.asarray(spec.restitution_grid), jnp.asarray(spec.restitution_damping)
    template = mjx.make_data(model)

    def physics(fields, data):
        return jax.vmap(lambda f, d: mjx.step(model.tree_replace(f), d))(fields, data)

    # ---- plants and starts ---------------------------------------------------------------------

    def model_fields(plant):
        mass = jnp.tile(model.body_mass, (n, 1))
        inertia = jnp.tile(model.body_inertia, (n, 1, 1))
        solref = jnp.tile(model.pair_solref, (n, 1, 1))
        mass = mass.at[:, quad].multiply(plant["mass_scale"]).at[:, ball].set(plant["ball_mass"])
        inertia = inertia.at[:, quad].multiply((plant["mass_scale"] * plant["inertia_scale"])[:, None])
        inertia = inertia.at[:, ball].set(jnp.broadcast_to((0.4 * plant["ball_mass"] * spec.ball_radius ** 2)[:, None],
                                                           (n, 3)))
        ref = jnp.stack([jnp.full(n, -spec.contact_frequency ** 2), -jnp.interp(plant["restitution"], grid, damping)],
                        axis=1)
        solref = solref.at[:, pair].set(ref)
        return {"body_mass": mass, "body_inertia": inertia, "pair_solref": solref}

    def fresh(key):
        """Every pair at the start of a new episode: plant, physics, controller, task, queue."""
        k_draw, k_noise = jax.random.split(key)
        plant = draws.draw(k_draw, n)
        quad_pos = home + plant["quad_start_offset"]
        ball_pos = jnp.concatenate([quad_pos[:, :2], jnp.full((n, 1), home[2])], axis=1) + plant["ball_start_offset"]
        unit = jnp.tile(jnp.asarray([1.0, 0.0, 0.0, 0.0]), (n, 1))
        qpos = jnp.tile(template.qpos, (n, 1))
        qpos = qpos.at[:, qq:qq + 3].set(quad_pos).at[:, qq + 3:qq + 7].set(unit)
        qpos = qpos.at[:, bq:bq + 3].set(ball_pos).at[:, bq + 3:bq + 7].set(unit)
        data = jax.vmap(lambda q: template.replace(qpos=q))(qpos)
        every = jnp.ones(n, bool)
        controller = controller_reset(ControllerState.zeros(n), every, spec.controller)
        queue = jnp.zeros((n, spec.queue_len, 4)).at[:, :, 0].set(spec.hover_action)
        s = _kinematics(data)
        zone, _ = in_zone(s["ball_pos"], *racket(s)[1:])
        zeros_i = jnp.zeros(n, jnp.int32)
        task = TaskState(zeros_i, zeros_i, zeros_i, jnp.full(n, min_hit_steps, jnp.int32),
                         jnp.full(n, cfg.contact_steps, jnp.int32), jnp.zeros(n, bool), jnp.zeros(n), jnp.zeros(n),
                         jnp.zeros(n), zeros_i, jnp.zeros((n, 2, 4)), s["ball_vel"], zone, jnp.zeros(n))
        measured = ball_pos + jax.random.normal(k_noise, (n, 3)) * plant["position_noise"][:, None]
        return data, controller, task, plant, model_fields(plant), queue, measured, jnp.zeros((n, 3))

    def select(mask, new, old):
        return jax.tree.map(lambda a, b: jnp.where(mask.reshape((n,) + (1,) * (a.ndim - 1)), a, b), new, old)

    # ---- task ----------------------------------------------------------------------------------

    def _kinematics(data):
        return {"quad_pos": data.qpos[:, qq:qq + 3], "quad_quat": data.qpos[:, qq + 3:qq + 7],
                "quad_vel": data.qvel[:, qv:qv + 3], "quad_rates": data.qvel[:, qv + 3:qv + 6],
                "ball_pos": data.qpos[:, bq:bq + 3], "ball_vel": data.qvel[:, bv:bv + 3]}

    def racket(s):
        rot = quat_to_mat(s["quad_quat"])
        normal = rot[:, :, 2]
        return rot, s["quad_pos"] + cfg.racket_top_offset * normal, normal

    def in_zone(ball_pos, centre, normal):
        rel = ball_pos - centre
        h = jnp.sum(rel * normal, axis=1)
        radial = jnp.linalg.norm(rel - h[:, None] * normal, axis=1)
        zone = (radial <= cfg.racket_radius + 0.02) & (h >= -0.02) & (h <= cfg.ball_radius + 0.06)
        return zone, radial

    def task_step(t: TaskState, s, action):
        finite = jnp.all(jnp.isfinite(jnp.concatenate(list(s.values()), axis=1)), axis=1)
        rot, centre, normal = racket(s)
        zone, radial = in_zone(s["ball_pos"], centre, normal)
        dv = jnp.sum((s["ball_vel"] - t.prev_ball_vel) * normal, axis=1)
        steps, since_hit, since_contact = t.steps + 1, t.since_hit + 1, t.since_contact + 1
        jump = finite & (zone | t.prev_ball_in_zone) & (dv > cfg.hit_dv)
        contact = jump & (since_contact > cfg.contact_steps)
        since_contact = jnp.where(jump, 0, since_contact)
        hit = contact & (since_hit >= min_hit_steps) & (radial <= cfg.racket_radius)
        since_hit = jnp.where(hit, 0, since_hit)
        contact_z = jnp.where(hit, centre[:, 2], t.contact_z)
        apex = t.awaiting_apex & (s["ball_vel"][:, 2] <= 0.0) & ~hit
        awaiting = (t.awaiting_apex | hit) & ~apex
        ball_z = s["ball_pos"][:, 2]
        actions = jnp.stack([action, t.actions[:, 0]], axis=1)
        new = TaskState(steps, t.hits + hit, t.contacts + contact, since_hit, since_contact, awaiting,
                        t.apex_sum + jnp.where(apex, ball_z - (home[2] + cfg.racket_top_offset), 0.0),
                        t.apex_above_contact_sum + jnp.where(apex, ball_z - contact_z, 0.0), contact_z,
                        t.apexes + apex, actions, s["ball_vel"], zone, t.ret)
        ball_lost = ((ball_z < centre[:, 2] - cfg.ball_lost_below)
                     | (jnp.linalg.norm(s["ball_pos"][:, :2] - home[:2], axis=1) > cfg.max_xy))
        qz = s["quad_pos"][:, 2]
        crash = ((qz < cfg.min_quad_z) | (qz > cfg.max_quad_z) | (normal[:, 2] < cos_tilt)
                 | (jnp.linalg.norm(s["quad_pos"][:, :2] - home[:2], axis=1) > cfg.max_xy))
        terminated = ball_lost | crash | ~finite
        terms = reward_terms(s, rot, centre, radial, hit, apex, terminated, actions, finite)
        return new, terms, terminated, hit, ball_lost & finite, crash & finite & ~ball_lost

    def reward_terms(s, rot, centre, radial, hit, apex, terminated, actions, finite):
        w = cfg.weights
        apex_z = home[2] + cfg.racket_top_offset + cfg.apex_height
        apex_xy = jnp.linalg.norm(s["ball_pos"][:, :2] - home[:2], axis=1)
        ball_z = s["ball_pos"][:, 2]
        terms = {
            "hit": w.hit * hit * (0.5 + 0.5 * jnp.exp(-(radial / cfg.hit_centre_scale) ** 2)),
            "apex": w.apex * apex * jnp.exp(-((ball_z - apex_z) / cfg.apex_tolerance) ** 2)
            * jnp.exp(-(apex_xy / cfg.apex_xy_tolerance) ** 2),
            "track": w.track * jnp.exp(-(jnp.linalg.norm(s["ball_pos"][:, :2] - centre[:, :2], axis=1) / 0.15) ** 2),
            "smooth": w.smooth * jnp.exp(-jnp.linalg.norm(actions[:, 0] - actions[:, 1], axis=1)),
            "position": -w.position * jnp.linalg.norm(s["quad_pos"][:, :2] - home[:2], axis=1),
            "height": -w.height * jnp.abs(s["quad_pos"][:, 2] - home[2]),
            "yaw": -w.yaw * jnp.abs(jnp.arctan2(rot[:, 1, 0], rot[:, 0, 0])),
            "rates": -w.rates * jnp.sum(s["quad_rates"] ** 2, axis=1),
        }
        terms = {k: jnp.where(finite, v, 0.0) for k, v in terms.items()}
        terms["termination"] = -w.termination * terminated.astype(jnp.float32)
        return terms

    def observation(s, centre_rot, actions):
        rot, centre = centre_rot
        obs = jnp.concatenate([s["quad_pos"] - home, s["quad_vel"], rot.reshape(n, 9), s["quad_rates"],
                               s["ball_pos"] - centre, s["ball_vel"], actions.reshape(n, 8)], axis=1)
        return jnp.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0).astype(jnp.float32)

    def observe(state: EnvState, key):
        s, p, t = _kinematics(state.data), state.plant, state.task
        rot, centre, _ = racket(s)
        clean = observation(s, (rot, centre), t.actions)
        k1, k2, k3 = jax.random.split(key, 3)
        noisy = dict(s, quad_pos=s["quad_pos"] + jax.random.normal(k1, (n, 3)) * p["position_noise"][:, None],
                     quad_vel=s["quad_vel"] + jax.random.normal(k2, (n, 3)) * p["velocity_noise"][:, None],
                     quad_rates=s["quad_rates"] + jax.random.normal(k3, (n, 3)) * p["rate_noise"][:, None],
                     ball_pos=state.ball_pos_measured, ball_vel=state.ball_vel_measured)
        # the racket seen by the policy is where the noisy pose puts it, as JuggleTask.observation computes it
        n_rot, n_centre, _ = racket(noisy)
        privileged = jnp.stack([p["restitution"], p["ball_mass"] / 0.047, p["mass_scale"], p["inertia_scale"],
                                p["thrust_scale"], p["motor_tau"] / 0.027, p["action_latency_steps"] / 2.0,
                                jnp.minimum(t.since_hit / (2.0 * cfg.policy_hz), 1.0),
                                t.steps / cfg.max_episode_steps], axis=1).astype(jnp.float32)
        return observation(noisy, (n_rot, n_centre), t.actions), jnp.concatenate([clean, privileged], axis=1)

    # ---- the policy step -----------------------------------------------------------------------

    def start(key) -> EnvState:
        k_fresh, k_state = jax.random.split(key)
        return EnvState(*fresh(k_fresh), key=k_state)

    @jax.jit
    def reset_all(key):
        state = start(key)
        k_obs, k_next = jax.random.split(state.key)
        state = state._replace(key=k_next)
        return state, observe(state, k_obs)

    @jax.jit
    def step(state: EnvState, actions):
        a = jnp.clip(actions.astype(jnp.float32), -1.0, 1.0)
        queue = jnp.concatenate([a[:, None], state.queue[:, :-1]], axis=1)
        executed = jnp.take_along_axis(queue, state.plant["action_latency_steps"].astype(jnp.int32)[:, None, None],
                                       axis=1)[:, 0]
        lo, hi = CTBR_THRUST_RANGE
        ctbr = jnp.concatenate([lo + (executed[:, :1] + 1.0) * 0.5 * (hi - lo), executed[:, 1:] * CTBR_MAX_RATE],
                               axis=1)
        thrust_scale, tau = state.plant["thrust_scale"][:, None], state.plant["motor_tau"]

        def substep(carry, _):
            data, ctl = carry
            ctl, thrust = controller_step(ctl, ctbr, data.qvel[:, qv + 3:qv + 6], spec.dt, tau, spec.controller)
            data = data.replace(ctrl=data.ctrl.at[:, spec.act[0]:spec.act[1]].set(thrust * thrust_scale))
            return (physics(state.fields, data), ctl), None

        (data, controller), _ = jax.lax.scan(substep, (state.data, state.controller), None, length=spec.n_substeps)
        key, k_noise, k_fresh, k_obs = jax.random.split(state.key, 4)
        s = _kinematics(data)
        noisy = s["ball_pos"] + jax.random.normal(k_noise, (n, 3)) * state.plant["position_noise"][:, None]
        ball_vel_measured = (noisy - state.ball_pos_measured) * cfg.policy_hz
        task, terms, terminated, hit, ball_lost, crash = task_step(state.task, s, a)
        reward = sum(terms[k] for k in LOG_KEYS)
        task = task._replace(ret=task.ret + reward)
        truncated = (task.steps >= cfg.max_episode_steps) & ~terminated
        ended = terminated | truncated
        log = jnp.concatenate([jnp.stack([terms[k].mean() for k in LOG_KEYS]), jnp.stack([
            ended.sum(), jnp.where(ended, task.hits, 0).sum(), jnp.where(ended, task.steps, 0).sum(),
            jnp.where(ended, task.apex_sum / jnp.maximum(task.apexes, 1), 0.0).sum(),
            (ended & ball_lost).sum(), (ended & crash).sum()]).astype(jnp.float32)])
        stepped = (data, controller, task, state.plant, state.fields, queue, noisy, ball_vel_measured)
        new = EnvState(*select(ended, fresh(k_fresh), stepped), key=key)
        return new, StepOut(reward.astype(jnp.float32), terminated, truncated, hit, log), observe(new, k_obs)

    @jax.jit
    def raw_step(fields, data, ctrl):
        def substep(d, _):
            return physics(fields, d.replace(ctrl=ctrl)), None

        return jax.lax.scan(substep, data, None, length=spec.n_substeps)[0]

    return StepFunctions(reset_all, step, raw_step)


def sphere_cylinder(sphere, cylinder):
    """Exact contact of a sphere with a solid cylinder (MJX collider convention: geom infos with ``pos``,
    ``mat``, ``size``; returns signed distance, contact position midway between the surfaces, and the
    contact frame whose first row is the normal from the sphere to the cylinder)."""
    import jax.numpy as jnp
    from mujoco.mjx._src import math as mjx_math

    radius, half_height = cylinder.size[0], cylinder.size[1]
    p = cylinder.mat.T @ (sphere.pos - cylinder.pos)  # sphere centre in the cylinder's frame
    rxy = jnp.sqrt(p[0] ** 2 + p[1] ** 2)
    u = jnp.where(rxy > 1e-12, p[:2] / jnp.maximum(rxy, 1e-12), jnp.asarray([1.0, 0.0]))
    side = jnp.where(p[2] >= 0, 1.0, -1.0)
    outside = (rxy > radius) | (jnp.abs(p[2]) > half_height)
    # outside: the closest point of the solid; inside: out through the nearer of face and side
    closest = jnp.concatenate([u * jnp.minimum(rxy, radius), jnp.clip(p[2:], -half_height, half_height)])
    gap = p - closest
    gap_len = jnp.sqrt(jnp.sum(gap ** 2))
    face_depth, side_depth = half_height - jnp.abs(p[2]), radius - rxy
    through_face = face_depth < side_depth
    surface_in = jnp.where(through_face, jnp.concatenate([p[:2], side[None] * half_height]),
                           jnp.concatenate([u * radius, p[2:]]))
    normal_in = jnp.where(through_face, jnp.asarray([0.0, 0.0, 1.0]) * side, jnp.concatenate([u, jnp.zeros(1)]))
    surface = jnp.where(outside, closest, surface_in)
    normal = jnp.where(outside, gap / jnp.maximum(gap_len, 1e-12), normal_in)  # out of the cylinder
    dist = jnp.where(outside, gap_len, -jnp.minimum(face_depth, side_depth)) - sphere.size[0]
    pos = cylinder.pos + cylinder.mat @ (surface + normal * 0.5 * dist)
    return dist, pos, mjx_math.make_frame(-(cylinder.mat @ normal))


def install_sphere_cylinder() -> None:
    """MJX's sphere-cylinder collider replaced by :func:`sphere_cylinder` (read when a step is traced)."""
    from mujoco.mjx._src import collision_driver
    from mujoco.mjx._src.collision_primitive import collider
    from mujoco.mjx._src.types import GeomType

    key = (GeomType.SPHERE, GeomType.CYLINDER)
    if getattr(collision_driver._COLLISION_FUNC[key], "exact", False):
        return
    exact = collider(ncon=1)(sphere_cylinder)
    exact.exact = True
    collision_driver._COLLISION_FUNC[key] = exact


def quat_to_mat(q):
    """(N, 4) wxyz quaternions (normalised here) -> (N, 3, 3), as :func:`robot_rl.control.rotations.quat_to_mat`."""
    import jax.numpy as jnp

    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    rows = [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]
    return jnp.stack(rows, axis=-1).reshape(q.shape[0], 3, 3)

