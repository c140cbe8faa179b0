"""The juggling vector env of a physics back end: :class:`~robot_rl.robots.quad.vec_env.QuadJuggleVecEnv`
over CPU threads or MuJoCo Warp, or the all-JAX :class:`~robot_rl.robots.quad.mjx.QuadJuggleMJXVecEnv`."""

from __future__ import annotations

from typing import Any

from robot_rl.robots.quad.vec_env import PHYSICS_BACKENDS, QuadJuggleVecEnv

__all__ = ["make_vec_env"]


def make_vec_env(num_envs: int, device: str = "cpu", physics: str = "auto", **kwargs: Any):
    """The vector env of ``physics`` (:data:`~robot_rl.robots.quad.vec_env.PHYSICS_BACKENDS`; ``auto`` on a
    CUDA ``device``: MJX when installed). Keyword arguments as :class:`QuadJuggleVecEnv`'s (MJX takes no
    ``nthread``: it is dropped)."""
    if physics not in PHYSICS_BACKENDS:
        raise ValueError(f"physics must be one of {PHYSICS_BACKENDS}, got {physics!r}")
    if physics == "auto" and str(device).startswith("cuda"):
        from robot_rl.robots.quad.mjx import mjx_available

        physics = "mjx" if mjx_available() else "auto"
    if physics == "mjx":
        from robot_rl.robots.quad.mjx import QuadJuggleMJXVecEnv

        kwargs.pop("nthread", None)
        return QuadJuggleMJXVecEnv(num_envs, device=str(device), **kwargs)
    return QuadJuggleVecEnv(num_envs, device=device, physics=physics, **kwargs)
