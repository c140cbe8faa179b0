"""A simulator node's time, written once for every simulator (arm_sim, quad_sim, car_sim, env_sim).

Simulated time advances one control period per step and never goes back, across resets too, so every
observation's stamp is unique. In `lockstep` the node publishes `/clock` with each observation and, when
no command has answered the current observation for `republish_period_s`, publishes it again
(best-effort sensor topics may drop a message; the actor answers a repeat by resending its command).
In `realtime` a wall-clock timer calls the node's step at the control rate. `~/reset` (std_srvs/Trigger) starts a
new episode one period later and answers with its first observation's stamp.
"""

from __future__ import annotations

import time
from typing import Callable

from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from std_srvs.srv import Trigger

from robot_rl.ros.messages import ns_to_stamp
from robot_rl.ros.node_utils import reset_done


class SimulatedTime:
    def __init__(self, node: Node, period_s: float, lockstep: bool, republish_period_s: float,
                 counters: dict[str, int], publish_observation: Callable[[int], None],
                 realtime_step: Callable[[], None], new_episode: Callable[[], None]):
        """`publish_observation(stamp_ns)` publishes the simulator's observation stamped `stamp_ns`;
        `realtime_step()` steps it once (realtime mode); `new_episode()` resets the simulation (and
        forgets the last command) for `~/reset`; `counters["republished"]` and `counters["resets"]`
        count repeats and resets."""
        self.period_ns = int(round(period_s * 1e9))
        self.now_ns = self.period_ns
        self.lockstep = lockstep
        self._counters = counters
        self._publish_observation = publish_observation
        self._republish_period_s = republish_period_s
        self._last_publish_wall = 0.0
        self._new_episode = new_episode
        counters.setdefault("resets", 0)
        node.create_service(Trigger, "~/reset", self._on_reset)
        self._clock_pub = node.create_publisher(Clock, "/clock", 10) if lockstep else None
        if lockstep:
            node.create_timer(republish_period_s, self._republish_if_idle)
        else:
            node.create_timer(period_s, realtime_step)

    def advance(self) -> None:
        """One control period passes (a step, or a reset: the new episode's first stamp is new too)."""
        self.now_ns += self.period_ns

    def publish(self) -> None:
        """The observation at the current time: `/clock` first in lockstep, then the node's topics."""
        if self._clock_pub is not None:
            self._clock_pub.publish(Clock(clock=ns_to_stamp(self.now_ns)))
        self._publish_observation(self.now_ns)
        self._last_publish_wall = time.monotonic()

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.advance()
        self._new_episode()
        self._counters["resets"] += 1
        self.publish()
        return reset_done(response, self.now_ns)

    def _republish_if_idle(self) -> None:
        if time.monotonic() - self._last_publish_wall >= self._republish_period_s:
            self._counters["republished"] += 1
            self.publish()
