"""MuJoCo Warp back end of the juggling vector env: every pair in one batched model on the GPU.

:class:`WarpPhysics` is a drop-in for :class:`~robot_rl.robots.quad.physics.RolloutPhysics`
(the same scene, plant draws, rate controller and state), so :class:`JuggleCore` and the PPO
runner use it unchanged: ``QuadJuggleVecEnv(..., device="cuda")`` picks it. Each pair keeps its
own drawn masses, inertia and restitution as per-world rows of the batched model fields
(``body_mass``, ``body_inertia``, ``pair_solref`` and the constants ``set_const`` derives from
them), so there are no shared model variants.

The rate controller + mixer + motor model stays the numpy :class:`QuadController` that the CPU
back end, the single env and the ROS sim node run: each 2 ms substep reads the body rates back
and writes the rotor thrusts, one small copy each way. That keeps one controller implementation
for every back end at the price of a device sync per substep.

Without a GPU, Warp compiles the same kernels for the CPU (slow, minutes to compile on first use;
what the tests use to check this back end against the CPU one).
"""

from __future__ import annotations

import os

import numpy as np

from robot_rl.robots.quad.juggling import JuggleState
from robot_rl.robots.quad.env import QuadJuggleConfig
from robot_rl.robots.quad.physics import MODEL_PARAMS, BatchedPhysics, plant_model_fields

__all__ = ["WarpPhysics", "warp_available"]

_PLANT_FIELDS = ("body_mass", "body_inertia", "pair_solref")
# set_const derives these from the masses and inertia: per world too, or they would be one world's
_DERIVED_FIELDS = ("body_subtreemass", "body_invweight0", "dof_invweight0")


def warp_available() -> bool:
    """Whether MuJoCo Warp can be imported (``pip install mujoco-warp``)."""
    try:
        import mujoco_warp  # noqa: F401
    except ImportError:
        return False
    return True


class WarpPhysics(BatchedPhysics):
    """N pairs in one MuJoCo Warp model.

    Args:
        n: number of pairs (worlds).
        sim_config: physics configuration (policy rate, timestep, gains, ...).
        device: Warp device ("cuda:0", "cpu"; default: the first GPU, else the CPU).
        xml_path: MJCF scene.

    Raises:
        ImportError: MuJoCo Warp is not installed (with the install command).
    """

    def __init__(self, n: int, sim_config: QuadJuggleConfig | None = None, device: str | None = None,
                 xml_path: str | os.PathLike | None = None) -> None:
        try:
            import warp as wp

            wp.config.log_level = wp.LOG_WARNING  # no banner and per-kernel load lines on stdout
            import mujoco_warp as mjw
        except ImportError as e:
            raise ImportError("the Warp physics back end needs MuJoCo Warp: pip install mujoco-warp") from e
        super().__init__(n, sim_config, xml_path)
        self._wp, self._mjw = wp, mjw
        self.device = device if device is not None else ("cuda:0" if wp.is_cuda_available() else "cpu")
        base, m = self.base, self.base.model
        batched = {name: self.n for name in _PLANT_FIELDS + _DERIVED_FIELDS}
        with wp.ScopedDevice(self.device):
            self.model = mjw.put_model(m, batch_sizes=batched)
            # the ball-racket pair is the only contact (the floor's are off): a handful per world
            self.data = mjw.put_data(m, base.data, nworld=self.n, nconmax=8, njmax=32)
        self._fields = {name: np.tile(getattr(m, name), (self.n,) + (1,) * getattr(m, name).ndim)
                        for name in _PLANT_FIELDS}
        self._q = {"quad": base._qq, "ball": base._bq}
        self._v = {"quad": base._qv, "ball": base._bv}
        self._host: tuple[np.ndarray, np.ndarray] | None = None

    # ---- plant and state ---------------------------------------------------------------------

    def set_plant(self, ids: np.ndarray, values: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Plant of pairs ``ids`` (``rng`` unused: every pair has its own model rows)."""
        drawn = plant_model_fields(self.nominal, self.ids, {name: values[name] for name in MODEL_PARAMS},
                                   self.dt, self.contact_frequency)
        with self._wp.ScopedDevice(self.device):
            for name, rows in drawn.items():
                self._fields[name][ids] = rows
                getattr(self.model, name).assign(self._fields[name].astype(np.float32))
            self._mjw.set_const(self.model, self.data)
        self._set_actuation(ids, values)
        self._host = None

    def set_state(self, ids: np.ndarray, quad_pos: np.ndarray, ball_pos: np.ndarray) -> None:
        """Pairs ``ids``: MuJoCo data cleared, quadrotor level and at rest at ``quad_pos``, ball at
        rest at ``ball_pos``, controller cleared with the motors at hover throttle."""
        wp = self._wp
        mask = np.zeros(self.n, dtype=bool)
        mask[ids] = True
        with wp.ScopedDevice(self.device):
            self._mjw.reset_data(self.model, self.data, reset=wp.array(mask, dtype=bool))
            qpos = self.data.qpos.numpy()
            q, b = self._q["quad"], self._q["ball"]
            qpos[ids, q:q + 3] = quad_pos
            qpos[ids, q + 3:q + 7] = (1.0, 0.0, 0.0, 0.0)
            qpos[ids, b:b + 3] = ball_pos
            qpos[ids, b + 3:b + 7] = (1.0, 0.0, 0.0, 0.0)
            self.data.qpos.assign(qpos)
        self._reset_controller(ids)
        self._host = None

    def _read(self) -> tuple[np.ndarray, np.ndarray]:
        if self._host is None:
            self._host = (self.data.qpos.numpy().astype(np.float64), self.data.qvel.numpy().astype(np.float64))
        return self._host

    def state(self) -> JuggleState:
        qpos, qvel = self._read()
        q, v, bq, bv = self._q["quad"], self._v["quad"], self._q["ball"], self._v["ball"]
        return JuggleState(qpos[:, q:q + 3].copy(), qpos[:, q + 3:q + 7].copy(), qvel[:, v:v + 3].copy(),
                           qvel[:, v + 3:v + 6].copy(), qpos[:, bq:bq + 3].copy(), qvel[:, bv:bv + 3].copy())

    # ---- stepping ----------------------------------------------------------------------------

    def _body_rates(self) -> np.ndarray:
        v = self._v["quad"]
        return self._read()[1][:, v + 3:v + 6]

    def _substep(self, rotor_thrust: np.ndarray) -> None:
        with self._wp.ScopedDevice(self.device):
            self.data.ctrl.assign(rotor_thrust.astype(np.float32))
            self._mjw.step(self.model, self.data)
        self._host = None

