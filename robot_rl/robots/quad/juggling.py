"""The juggling task: hit detection, rewards, terminations and observations, batched in numpy.

One implementation serves every place that needs it: the vectorized training env, the single
gymnasium env, the evaluation benchmark and the ROS actor (which rebuilds the same
:class:`JuggleState` from ``quad/odom`` and ``ball/pose``), so a hit counted in training is
a hit counted on the robot.

Hits are detected from kinematics only (what motion capture gives on the real robot): the ball
is in the racket zone (centre within the racket's radius of its axis, just above its surface,
at this or the previous step) and its velocity along the racket normal jumped up by more than
``hit_dv`` in one policy step (gravity alone changes it by -g dt).  A jump within
``contact_steps`` of the previous one is the same contact; a hit is *counted* (rewarded, and
what the benchmarks report) by JuggleRL's "true hit" rule: the ball's centre inside the racket
cylinder (within ``racket_radius`` of its axis) and at least ``min_hit_interval_s`` (0.6 s, 30
steps at 50 Hz) since the last counted one, so bouncing the ball in place on the racket earns
nothing. Apexes are measured above the racket surface where it met the ball.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from robot_rl.control.rotations import quat_to_mat

__all__ = [
    "OBS_DIM",
    "PRIVILEGED_DIM",
    "JuggleConfig",
    "JuggleRewardWeights",
    "JuggleState",
    "JuggleTask",
    "yaw_of",
]

OBS_DIM = 32
"""Policy observation: quad position - home (3), velocity (3), rotation matrix (9), body rates (3),
ball position - racket centre (3), ball velocity (3; differenced from the measured positions over
one policy step, as the ROS actor gets it from ``ball/pose``), the last two policy actions (8)."""
PRIVILEGED_DIM = 9
"""Critic-only extras: restitution, ball mass, mass / inertia / thrust scales, motor time constant,
action latency, time since the last hit, episode progress."""


@dataclass
class JuggleRewardWeights:
    """Weights of the reward terms (each term's value before weighting is documented in
    :meth:`JuggleTask.reward_terms`)."""

    hit: float = 5.0
    """Per counted hit, times 0.5 + 0.5 exp(-(d / hit_centre_scale)^2), d the ball's distance
    from the racket axis at the hit."""
    apex: float = 5.0
    """Once per counted hit, at the ball's next apex: closeness of the apex to the target height
    and above home."""
    track: float = 0.2
    """Per step: exp(-(horizontal ball-racket distance / 0.15 m)^2)."""
    smooth: float = 0.3
    """Per step: exp(-|a_t - a_{t-1}|), the policy's action change."""
    position: float = 0.5
    """Per step penalty: horizontal distance of the quadrotor from home [m]."""
    height: float = 0.5
    """Per step penalty: |z - home z| [m]."""
    yaw: float = 0.3
    """Per step penalty: |yaw| [rad]."""
    rates: float = 0.01
    """Per step penalty: |body rates|^2 [rad^2/s^2]."""
    termination: float = 10.0
    """Penalty when the episode terminates (ball lost, crash)."""


@dataclass
class JuggleConfig:
    """The juggling task (geometry, hit detection, rewards, terminations, horizon)."""

    home: tuple[float, float, float] = (0.0, 0.0, 1.0)
    """Where the quadrotor's body origin should hover [m]."""
    apex_height: float = 0.6
    """Target apex of the ball's centre above the home racket surface [m] (JuggleRL: 1.6 m apex
    with the drone at 1 m)."""
    apex_tolerance: float = 0.2
    """Scale of the apex reward's height term [m]."""
    apex_xy_tolerance: float = 0.25
    """Scale of the apex reward's horizontal term (apex above home) [m]."""
    hit_centre_scale: float = 0.05
    """Scale of the hit reward's centring term [m] (JuggleRL: 0.05)."""
    racket_radius: float = 0.15
    """Racket radius [m] (the MJCF's racket geom)."""
    racket_top_offset: float = 0.059
    """Racket surface above the body origin along body z [m] (the MJCF's racket)."""
    ball_radius: float = 0.04
    """Ball radius [m]."""
    hit_dv: float = 0.5
    """Minimum jump of the ball's velocity along the racket normal in one step for a hit [m/s]."""
    contact_steps: int = 3
    """Jumps within this many steps of the previous one belong to the same contact."""
    min_hit_interval_s: float = 0.6
    """A hit counts when at least this long after the last counted one [s]: JuggleRL's true hit
    (30 steps at 50 Hz; the ball rose at least 44 cm above the contact). Until 2026-11-25: 0.3 s."""
    policy_hz: float = 50.0
    """Policy rate [Hz]."""
    max_episode_s: float = 15.0
    """Training horizon [s]; reaching it truncates (bootstrapped) the episode."""
    min_quad_z: float = 0.3
    max_quad_z: float = 3.0
    max_tilt_deg: float = 70.0
    """Terminate when the racket normal tilts further than this from vertical."""
    max_xy: float = 2.0
    """Terminate when the quadrotor or the ball is further than this from home horizontally [m]."""
    ball_lost_below: float = 0.2
    """The ball is lost once its centre is this far below the racket surface [m]."""
    weights: JuggleRewardWeights = field(default_factory=JuggleRewardWeights)

    @property
    def dt(self) -> float:
        return 1.0 / self.policy_hz

    @property
    def max_episode_steps(self) -> int:
        return int(round(self.max_episode_s * self.policy_hz))

    def validate(self) -> None:
        positive = ("apex_height", "apex_tolerance", "apex_xy_tolerance", "hit_centre_scale", "racket_radius",
                    "ball_radius", "hit_dv", "min_hit_interval_s", "policy_hz", "max_episode_s", "max_xy",
                    "ball_lost_below")
        for name in positive:
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"JuggleConfig.{name} must be finite and positive, got {value}")
        if self.contact_steps < 1:
            raise ValueError(f"JuggleConfig.contact_steps must be >= 1, got {self.contact_steps}")
        if not 0 < self.max_tilt_deg < 180:
            raise ValueError(f"JuggleConfig.max_tilt_deg must be in (0, 180), got {self.max_tilt_deg}")
        if not self.min_quad_z < self.home[2] < self.max_quad_z:
            raise ValueError("JuggleConfig: home z must lie between min_quad_z and max_quad_z")


@dataclass
class JuggleState:
    """Physical state of N quadrotor + ball pairs, world frame z up, float64 arrays."""

    quad_pos: np.ndarray
    """(N, 3) body origin [m]."""
    quad_quat: np.ndarray
    """(N, 4) orientation, wxyz."""
    quad_vel: np.ndarray
    """(N, 3) linear velocity [m/s]."""
    quad_rates: np.ndarray
    """(N, 3) body-frame angular velocity (FLU) [rad/s]."""
    ball_pos: np.ndarray
    """(N, 3) ball centre [m]."""
    ball_vel: np.ndarray
    """(N, 3) ball velocity [m/s]."""

    def finite(self) -> np.ndarray:
        """(N,) whether every value of each pair is finite."""
        parts = (self.quad_pos, self.quad_quat, self.quad_vel, self.quad_rates, self.ball_pos, self.ball_vel)
        return np.all(np.isfinite(np.concatenate(parts, axis=1)), axis=1)


def yaw_of(rotmat: np.ndarray) -> np.ndarray:
    """Heading angle [rad] of (N, 3, 3) rotation matrices (ZYX convention)."""
    return np.arctan2(rotmat[..., 1, 0], rotmat[..., 0, 0])


class JuggleTask:
    """Per-pair bookkeeping (hits, apexes, previous actions) and the task's batched functions.

    Call :meth:`reset` for pairs that start an episode, then :meth:`step` once per policy step
    with the state after it and the policy's action.
    """

    def __init__(self, n: int, config: JuggleConfig | None = None) -> None:
        self.config = cfg = config if config is not None else JuggleConfig()
        cfg.validate()
        self.n = int(n)
        self.home = np.asarray(cfg.home, dtype=np.float64)
        self.min_hit_steps = int(round(cfg.min_hit_interval_s * cfg.policy_hz))
        self._cos_tilt = float(np.cos(np.radians(cfg.max_tilt_deg)))
        self.steps = np.zeros(n, dtype=np.int64)
        """Steps since the episode began."""
        self.hits = np.zeros(n, dtype=np.int64)
        """Counted hits this episode."""
        self.contacts = np.zeros(n, dtype=np.int64)
        """All detected racket contacts this episode (counted or not)."""
        self.since_hit = np.zeros(n, dtype=np.int64)
        """Steps since the last counted hit (or since the episode began)."""
        self.since_contact = np.zeros(n, dtype=np.int64)
        self.awaiting_apex = np.zeros(n, dtype=bool)
        self.apex_sum = np.zeros(n)
        """Sum of the apex heights above the racket's home surface this episode (mean = / apexes)."""
        self.apex_above_contact_sum = np.zeros(n)
        """Sum of the apex heights above the racket surface where the hit met the ball (JuggleRL's)."""
        self.contact_z = np.zeros(n)
        """Height of the racket surface at the last counted hit [m]."""
        self.racket_speed_sum = np.zeros(n)
        """Sum of the racket's speed along its normal at the counted hits this episode [m/s] (mean = / hits):
        what a ball of lower restitution asks of the quadrotor."""
        self.apexes = np.zeros(n, dtype=np.int64)
        self.actions = np.zeros((n, 2, 4))
        """The last two policy actions, newest first."""
        self.prev_ball_vel = np.zeros((n, 3))
        self.prev_ball_in_zone = np.zeros(n, dtype=bool)

    # ------------------------------------------------------------------ geometry

    def racket(self, s: JuggleState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rotation matrices (N, 3, 3), racket surface centres (N, 3), racket normals (N, 3)."""
        rot = quat_to_mat(s.quad_quat)
        normal = rot[..., :, 2]
        return rot, s.quad_pos + self.config.racket_top_offset * normal, normal

    def _in_zone(self, s: JuggleState, centre: np.ndarray, normal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.config
        rel = s.ball_pos - centre
        h = np.einsum("ni,ni->n", rel, normal)
        radial = np.linalg.norm(rel - h[:, None] * normal, axis=1)
        zone = (radial <= cfg.racket_radius + 0.02) & (h >= -0.02) & (h <= cfg.ball_radius + 0.06)
        return zone, radial

    # ------------------------------------------------------------------ episode bookkeeping

    def reset(self, ids: np.ndarray, s: JuggleState) -> None:
        """Start episodes for the pairs ``ids`` (indices or a boolean mask) in state ``s`` (all N)."""
        for buf in (self.steps, self.hits, self.contacts, self.apexes):
            buf[ids] = 0
        self.since_hit[ids] = self.min_hit_steps  # an episode's first hit counts whenever it comes
        self.since_contact[ids] = self.config.contact_steps
        self.awaiting_apex[ids] = False
        self.apex_sum[ids] = 0.0
        self.apex_above_contact_sum[ids] = 0.0
        self.racket_speed_sum[ids] = 0.0
        self.actions[ids] = 0.0
        self.prev_ball_vel[ids] = s.ball_vel[ids]
        _, centre, normal = self.racket(s)
        self.prev_ball_in_zone[ids] = self._in_zone(s, centre, normal)[0][ids]

    def step(self, s: JuggleState, action: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
        """Advance the bookkeeping by one step into state ``s`` after the policy's ``action`` (N, 4).

        Returns ``(terms, terminated, events)``: the weighted reward terms (N,) each (their sum is
        the reward, see :meth:`reward_terms`), the termination flags (N,), and ``events``: boolean
        ``hit`` (counted), ``contact`` (any racket contact), ``apex`` and the termination reasons
        ``ball_lost``, ``crash``, ``non_finite``.
        """
        cfg = self.config
        finite = s.finite()
        rot, centre, normal = self.racket(s)
        zone, radial = self._in_zone(s, centre, normal)
        dv = np.einsum("ni,ni->n", s.ball_vel - self.prev_ball_vel, normal)
        self.steps += 1
        self.since_hit += 1
        self.since_contact += 1
        jump = finite & (zone | self.prev_ball_in_zone) & (dv > cfg.hit_dv)
        contact = jump & (self.since_contact > cfg.contact_steps)
        self.since_contact[jump] = 0
        hit = contact & (self.since_hit >= self.min_hit_steps) & (radial <= cfg.racket_radius)
        self.contacts += contact
        self.hits += hit
        self.since_hit[hit] = 0
        self.contact_z[hit] = centre[hit, 2]
        self.racket_speed_sum += np.where(hit, np.einsum("ni,ni->n", s.quad_vel, normal), 0.0)
        # the apex of the flight that a counted hit started: the first step the ball falls again
        apex = self.awaiting_apex & (s.ball_vel[:, 2] <= 0.0) & ~hit
        self.awaiting_apex[hit] = True
        self.awaiting_apex[apex] = False
        apex_above_home = s.ball_pos[:, 2] - (self.home[2] + cfg.racket_top_offset)
        self.apex_sum += np.where(apex, apex_above_home, 0.0)
        self.apex_above_contact_sum += np.where(apex, s.ball_pos[:, 2] - self.contact_z, 0.0)
        self.apexes += apex

        self.actions[:, 1] = self.actions[:, 0]
        self.actions[:, 0] = action
        self.prev_ball_vel = s.ball_vel.copy()
        self.prev_ball_in_zone = zone

        ball_lost = ((s.ball_pos[:, 2] < centre[:, 2] - cfg.ball_lost_below)
                     | (np.linalg.norm(s.ball_pos[:, :2] - self.home[:2], axis=1) > cfg.max_xy))
        crash = ((s.quad_pos[:, 2] < cfg.min_quad_z) | (s.quad_pos[:, 2] > cfg.max_quad_z)
                 | (normal[:, 2] < self._cos_tilt)
                 | (np.linalg.norm(s.quad_pos[:, :2] - self.home[:2], axis=1) > cfg.max_xy))
        non_finite = ~finite
        terminated = ball_lost | crash | non_finite
        terms = self.reward_terms(s, rot, centre, radial, hit, apex, terminated)
        events = {"hit": hit, "contact": contact, "apex": apex, "ball_lost": ball_lost & finite,
                  "crash": crash & finite & ~ball_lost, "non_finite": non_finite}
        return terms, terminated, events

    def reward_terms(self, s: JuggleState, rot: np.ndarray, centre: np.ndarray, radial: np.ndarray,
                     hit: np.ndarray, apex: np.ndarray, terminated: np.ndarray) -> dict[str, np.ndarray]:
        """Weighted reward terms (N,) each; the step's reward is their sum. Non-finite pairs get
        only the termination penalty (their other terms would be NaN)."""
        cfg, w = self.config, self.config.weights
        apex_z = self.home[2] + cfg.racket_top_offset + cfg.apex_height
        apex_xy = np.linalg.norm(s.ball_pos[:, :2] - self.home[:2], axis=1)
        action_change = np.linalg.norm(self.actions[:, 0] - self.actions[:, 1], axis=1)
        terms = {
            "hit": w.hit * hit * (0.5 + 0.5 * np.exp(-(radial / cfg.hit_centre_scale) ** 2)),
            "apex": w.apex * apex * np.exp(-((s.ball_pos[:, 2] - apex_z) / cfg.apex_tolerance) ** 2)
            * np.exp(-(apex_xy / cfg.apex_xy_tolerance) ** 2),
            "track": w.track * np.exp(-(np.linalg.norm(s.ball_pos[:, :2] - centre[:, :2], axis=1) / 0.15) ** 2),
            "smooth": w.smooth * np.exp(-action_change),
            "position": -w.position * np.linalg.norm(s.quad_pos[:, :2] - self.home[:2], axis=1),
            "height": -w.height * np.abs(s.quad_pos[:, 2] - self.home[2]),
            "yaw": -w.yaw * np.abs(yaw_of(rot)),
            "rates": -w.rates * np.sum(s.quad_rates ** 2, axis=1),
            "termination": -w.termination * terminated.astype(np.float64),
        }
        bad = ~s.finite()
        if bad.any():
            for name, value in terms.items():
                if name != "termination":
                    value[bad] = 0.0
        return terms

    # ------------------------------------------------------------------ observations

    def observation(self, s: JuggleState) -> np.ndarray:
        """(N, OBS_DIM) float32 policy observation of state ``s`` (add sensor noise to ``s``
        before calling, for a noisy one)."""
        rot, centre, _ = self.racket(s)
        n = s.quad_pos.shape[0]
        obs = np.concatenate([
            s.quad_pos - self.home, s.quad_vel, rot.reshape(n, 9), s.quad_rates,
            s.ball_pos - centre, s.ball_vel, self.actions.reshape(n, 8),
        ], axis=1)
        return np.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)

    def privileged(self, plant: dict[str, np.ndarray], latency: np.ndarray) -> np.ndarray:
        """(N, PRIVILEGED_DIM) float32: the critic's view of the plant and the episode."""
        cfg = self.config
        cols = [
            plant["restitution"], plant["ball_mass"] / 0.047, plant["mass_scale"], plant["inertia_scale"],
            plant["thrust_scale"], plant["motor_tau"] / 0.027, latency / 2.0,
            np.minimum(self.since_hit / (2.0 * cfg.policy_hz), 1.0), self.steps / cfg.max_episode_steps,
        ]
        return np.stack(cols, axis=1).astype(np.float32)
