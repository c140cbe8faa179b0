"""A simulator node's time, written once for every simulator (arm_sim, quad_sim, car_sim, env_sim).

Simulated time advances one control period per step and never goes back, across resets too, so every
observation's stamp is unique. In `lockstep` the node publishes `/clock` with each observation and, when
no command has answered the current observation for `republish_period_s`, publishes it again
(best-effort sensor topics may drop a message; the actor answers a repeat by resending its command).
In `realtime` a wall-clock timer calls the node's step at the control rate; while the actor's `session/status` says
a person paused the session, the simulation is frozen instead: time goes on and the same state is published again
each period (the view keeps its pictures, the actor its observations), but no physics step is taken, so nothing in
the scene moves (a real robot only holds, and what it holds may still slip). Lockstep simulation steps only when the
actor commands, which is never while a person is in the loop (their sessions run the simulator in realtime).
`~/reset` (std_srvs/Trigger) starts a new episode one period later and answers with its first observation's stamp.

A realtime simulator ticks at a phase of its period on the wall clock (`tick_phase`): a fleet's simulators on one
machine tick apart (robot k of N at k/N), so that one robot's physics, rendering and big image messages do not land
while another robot's actor acts. Two simulated arms on 2 cores, ticking by chance within 30 ms before each other,
stretched that actor's steps to a p99 of 16-20 ms; 40-70 ms apart, 9-12 ms.

A realtime simulator may stamp with the wall clock instead (`wall_stamps`): the stamps are still unique and never go
back, and, as a robot's, they pair with the frames of real cameras beside it.
"""

from __future__ import annotations

import time
from typing import Callable

from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String
from std_srvs.srv import Trigger

from robot_rl.ros import qos
from robot_rl.ros.messages import ns_to_stamp
from robot_rl.ros.node_utils import Param, reset_done
from robot_rl.teleop.session_status import SessionStatus


CLOCK_PARAMS = [
    Param("clock_mode", "lockstep", "Simulated-time lockstep or wall-clock real time.",
          choices=["lockstep", "realtime"]),
    Param("republish_period_s", 0.2, "Lockstep mode: republish the observation if no command came.", 0.01, 10.0),
    Param("tick_phase", 0.0, "Realtime mode: where in its period, as a fraction, the simulator ticks on the wall "
          "clock (a fleet's robot k of N: k/N, so that their steps do not collide on a shared CPU).", 0.0, 0.999),
]
"""Every simulator's clock parameters."""


def delay_to_phase(now_s: float, period_s: float, phase: float) -> float:
    """Seconds from `now_s` (wall clock) to the next instant at `phase` (a fraction) of a period."""
    return (phase * period_s - now_s) % period_s


class SimulatedTime:
    def __init__(self, node: Node, period_s: float, lockstep: bool, republish_period_s: float,
                 counters: dict[str, int], publish_observation: Callable[[int], None],
                 realtime_step: Callable[[], None], new_episode: Callable[[], None], wall_stamps: bool = False,
                 tick_phase: float = 0.0):
        """`publish_observation(stamp_ns)` publishes the simulator's observation stamped `stamp_ns`;
        `realtime_step()` steps it once (realtime mode); `new_episode()` resets the simulation (and
        forgets the last command) for `~/reset`; `counters["republished"]` and `counters["resets"]`
        count repeats and resets, `counters["paused_steps"]` the periods frozen by a person's pause and
        `counters["invalid_session_status"]` the malformed statuses ignored. `wall_stamps` (realtime only): the
        time is the wall clock's when each observation is taken. `tick_phase` (realtime only): the ticks fall at that
        fraction of the period on the wall clock."""
        if wall_stamps and lockstep:
            raise ValueError("wall-clock stamps need realtime mode: a lockstep simulator's time is its /clock")
        self.period_ns = int(round(period_s * 1e9))
        self.wall_stamps = wall_stamps
        self.now_ns = time.time_ns() if wall_stamps else self.period_ns
        self.lockstep = lockstep
        self._counters = counters
        self._publish_observation = publish_observation
        self._republish_period_s = republish_period_s
        self._last_publish_wall = 0.0
        self._new_episode = new_episode
        self.paused = False
        """A person paused the session: realtime steps are frozen."""
        for name in ("resets", "paused_steps", "invalid_session_status"):
            counters.setdefault(name, 0)
        node.create_service(Trigger, "~/reset", self._on_reset)
        self._clock_pub = node.create_publisher(Clock, "/clock", 10) if lockstep else None
        if lockstep:
            node.create_timer(republish_period_s, self._republish_if_idle)
        else:
            self._realtime_step = realtime_step
            node.create_subscription(String, "session/status", self._on_session_status, qos.EVENTS)
            # rcl's timers keep their start's phase (each next call one period after the last due one)
            time.sleep(delay_to_phase(time.time(), period_s, tick_phase))
            node.create_timer(period_s, self._realtime_tick)

    def advance(self) -> None:
        """One control period passes (a step, or a reset: the new episode's first stamp is new too)."""
        # On the wall clock: now, but never back (the system clock may be stepped) and never a stamp twice.
        self.now_ns = max(time.time_ns(), self.now_ns + 1) if self.wall_stamps else self.now_ns + self.period_ns

    def publish(self) -> None:
        """The observation at the current time: `/clock` first in lockstep, then the node's topics."""
        if self._clock_pub is not None:
            self._clock_pub.publish(Clock(clock=ns_to_stamp(self.now_ns)))
        self._publish_observation(self.now_ns)
        self._last_publish_wall = time.monotonic()

    def _on_session_status(self, msg: String) -> None:
        try:
            self.paused = SessionStatus.from_json(msg.data).phase == "paused"
        except ValueError:
            self._counters["invalid_session_status"] += 1

    def _realtime_tick(self) -> None:
        if not self.paused:
            self._realtime_step()
            return
        self._counters["paused_steps"] += 1
        self.advance()
        self.publish()

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
