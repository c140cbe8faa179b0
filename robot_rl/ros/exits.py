"""What a node's exit means for the run: restart it, let the run go on, or end the run. One decision for
both ways a graph is started, `robot-rl train` (the supervisor, robot_rl/ros/session.py) and `ros2 launch
robot_rl train.launch.py` (its OnProcessExit handlers), so the two never disagree: only a crash is restarted,
and an actor that finished is left finished while the rest of its fleet runs on."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from robot_rl.ros.graph import NodeSpec


def crashed(returncode: int) -> bool:
    """A crash worth a restart: killed by a signal (negative code) or an uncaught exception (1).
    Other codes are the node's own decision (0 done, 2 refused parameters, 3 data not delivered)
    and would only repeat."""
    return returncode < 0 or returncode == 1


class AfterExit(enum.Enum):
    RESTART = "restart"
    """Crashed with restarts left: start it again (it resumes where it stopped)."""
    GO_ON = "go on"
    """The run goes on without it: an actor of a fleet that finished while others still run, or a
    node the run does not depend on that stopped on its own."""
    END_RUN = "end run"
    """Stop every node: the last actor finished, or a node the run needs is gone for good."""


@dataclass(frozen=True)
class ExitDecision:
    after: AfterExit
    reason: str = ""
    """Why the run ends (END_RUN only), for the console and the launch's Shutdown event."""
    failed: bool = False
    """The run ends because something failed (the command exits non-zero and shows the node's log)."""


class RunExits:
    """Decides, for each exit of a graph's node, what happens next; it keeps what that needs: each node's
    restarts so far and the run-finishing nodes (every robot's actor) not yet finished."""

    def __init__(self, specs: Iterable[NodeSpec]):
        specs = list(specs)
        self.unfinished = {spec.key for spec in specs if spec.kind.finishes_run}
        self.fleet_size = len(self.unfinished)
        self.restarts = {spec.key: 0 for spec in specs}
        """Restarts decided so far, by node key."""

    def on_exit(self, spec: NodeSpec, returncode: int, stopping: bool = False) -> ExitDecision:
        """The decision for `spec`'s node exiting with `returncode`; `stopping`: the run is already being
        shut down (nothing is restarted, nothing more ends it)."""
        if stopping:
            return ExitDecision(AfterExit.GO_ON)
        if spec.kind.finishes_run and returncode == 0:
            self.unfinished.discard(spec.key)
            if self.unfinished:
                return ExitDecision(AfterExit.GO_ON)
            finished = f"{spec.key} finished" if self.fleet_size == 1 else f"all {self.fleet_size} actors finished"
            return ExitDecision(AfterExit.END_RUN, finished)
        restarts = self.restarts.get(spec.key, 0)
        if crashed(returncode) and restarts < spec.max_restarts:
            self.restarts[spec.key] = restarts + 1
            return ExitDecision(AfterExit.RESTART)
        # A node that fails (non-zero) ends the run even when the run could go on without it: the user asked
        # for it, and its failure (often a refused setting) would otherwise pass unseen.
        if spec.kind.critical or returncode != 0:
            after = f" after {restarts} restart(s)" if restarts else ""
            which = "critical node" if spec.kind.critical else "node"
            return ExitDecision(AfterExit.END_RUN, f"{which} {spec.key!r} exited with code {returncode}{after}",
                                failed=True)
        return ExitDecision(AfterExit.GO_ON)
