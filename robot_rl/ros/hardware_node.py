"""Base class of every hardware-facing node: a lifecycle node around a `SafetyGate`.

What every subclass gets:

- Lifecycle (`rclpy.lifecycle`): unconfigured -> configure -> inactive -> activate -> active.
  Nothing is sent to the hardware unless the node is active: `control_step` is only called while
  active, and output publishers made with `create_lifecycle_publisher` are disabled otherwise.
  With `autostart` (default) the node configures and activates itself, retrying activation every
  `activation_retry_s` while `activation_check` refuses (e.g. the robot's state topic is silent),
  so it works without a lifecycle manager; with `autostart:=false` a manager drives it through
  the standard `~/change_state` service.
- Safety parameters with ranges (`SAFETY_PARAMS`), an `/estop` subscription (std_msgs/Bool,
  `qos.LATCHED`) that latches the stop and sends the safe output at once (not at the next
  period), `~/reset_estop` (std_srvs/Trigger), a command watchdog that sends the safe output as
  soon as the last command expires, and the control timer at `control_hz`.
- Input validation plumbing: `create_checked_subscription` counts every message per input,
  turns a `Rejected` (or any unexpected exception) into a counted, logged rejection, and never
  lets a malformed message crash the node.
- `/diagnostics` (DiagnosticArray) every `diagnostics_period_s`: lifecycle state, verdict,
  the gate's counters and ages, per-input counts, and whatever `diagnostic_values` adds.

Subclass hooks (all optional except `control_step`): `configure_hardware`, `activation_check`,
`on_hardware_activate`, `cleanup_hardware`, `control_step(verdict)`, `diagnostic_values`.
`run_node(MyNode)` from `node_utils` runs it (single-threaded executor; `close()` sends the
safe output on the way out).
"""

from __future__ import annotations

import copy
import time
import traceback
from collections import Counter
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robot_rl.config_fields import config_from_params
from robot_rl.hardware.safety import Rejected, SafetyConfig, SafetyGate, StopReason
from robot_rl.ros import qos
from robot_rl.ros.messages import stamp_to_ns
from robot_rl.ros.node_utils import Param, ParameterError, declare_params, diagnostics, params_from_dataclass

__all__ = ["SAFETY_PARAMS", "HardwareError", "HardwareNode", "Rejected"]

SAFETY_PARAMS = [
    Param("control_hz", 10.0, "Control loop rate: control_step runs this often while active.", 1.0, 1000.0),
    *params_from_dataclass(SafetyConfig),
    Param("stamp_future_tolerance_s", 0.1, "Refuse messages stamped further than this in the future of the "
          "node's clock.", 0.0, 60.0),
    Param("autostart", True, "Configure and activate at start-up (retrying activation while it is refused), so "
          "the node runs without a lifecycle manager."),
    Param("activation_retry_s", 1.0, "autostart: time between activation attempts.", 0.05, 60.0),
    Param("diagnostics_period_s", 1.0, "Period of /diagnostics.", 0.05, 60.0),
]

# qos.LATCHED (reliable, transient local) with a reader queue of 10: a short True pulse followed
# by False while the executor is busy must still be seen (depth 1 would keep only the False).
ESTOP_QOS = copy.copy(qos.LATCHED)
ESTOP_QOS.depth = 10


class SimEstop:
    """A simulator node's latched `/estop`, as the hardware nodes obey it: a true `/estop` holds
    the simulated robot (`active`; the node decides what holding means, and `on_stop` runs once as it
    latches) until `~/reset_estop`. Each new e-stop counts in `counters["estops"]`."""

    def __init__(self, node, counters: dict[str, int], effect: str, on_stop: Callable[[], None] = lambda: None):
        self.node, self.counters, self.effect, self.on_stop = node, counters, effect, on_stop
        self.active = False
        counters.setdefault("estops", 0)
        node.create_subscription(Bool, "/estop", self._on_estop, ESTOP_QOS)
        node.create_service(Trigger, "~/reset_estop", self._on_reset)

    def _on_estop(self, msg: Bool) -> None:
        if msg.data and not self.active:
            self.active = True
            self.counters["estops"] += 1
            self.on_stop()
            self.node.get_logger().error(f"E-STOP: {self.effect} until ~/reset_estop")

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.active = False
        response.success, response.message = True, "e-stop cleared"
        return response

_OK, _WARN, _ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


class HardwareError(RuntimeError):
    """Raised by a configure/activate hook to refuse the transition with a clear message."""


class HardwareNode(LifecycleNode):
    """Lifecycle node with a `SafetyGate`; subclasses implement `control_step(verdict)`."""

    def __init__(self, node_name: str, params: Sequence[Param] = (), safety_defaults: Mapping[str, Any] | None = None,
                 **kwargs: Any):
        """`params`: the subclass's own parameters; `safety_defaults`: other defaults for
        SAFETY_PARAMS (e.g. {"control_hz": 50.0}); extra kwargs go to rclpy's Node."""
        super().__init__(node_name, **kwargs)
        defaults = dict(safety_defaults or {})
        unknown = set(defaults) - {sp.name for sp in SAFETY_PARAMS}
        if unknown:
            raise ValueError(f"safety_defaults names unknown parameters {sorted(unknown)}")
        safety = [replace(sp, default=defaults[sp.name]) if sp.name in defaults else sp for sp in SAFETY_PARAMS]
        p = self.params = declare_params(self, [*safety, *params])
        self.control_hz = float(p["control_hz"])
        self.control_period_s = 1.0 / self.control_hz
        try:
            self.gate = SafetyGate(config_from_params(SafetyConfig, p))
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        self.lifecycle_state = "unconfigured"
        self.last_verdict = StopReason.INACTIVE
        self.activation_refusal = ""
        """Why the last activation was refused ("" when it was not)."""
        self.input_counts: Counter[str] = Counter()
        self.input_rejections: Counter[str] = Counter()
        self.input_last_reject: dict[str, str] = {}
        self.step_counts: Counter[str] = Counter()
        self.control_errors = 0
        self._last_control_error = ""
        self._last_activation_attempt = -1e9
        self._current_input = ""  # label of the input whose callback is running

        self.create_subscription(Bool, "/estop", self._on_estop, ESTOP_QOS)
        self.create_service(Trigger, "~/reset_estop", self._on_reset_estop)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # Timers run on the steady clock: the hardware's periods never follow a simulated /clock.
        self.steady_clock = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(p["diagnostics_period_s"], self.publish_diagnostics, clock=self.steady_clock)
        self._control_timer = self.create_timer(self.control_period_s, self._on_control_timer, clock=self.steady_clock)
        # One-shot: fires just after the last command expires, so the safe output does not wait
        # for the next control period. +1 ms: the gate calls a command stale strictly after.
        self._watchdog_timer = self.create_timer(p["command_timeout_s"] + 1e-3, self._on_watchdog,
                                                 clock=self.steady_clock, autostart=False)
        if p["autostart"]:
            self._autostart_timer = self.create_timer(0.05, self._autostart, clock=self.steady_clock)

    # ---- hooks for subclasses --------------------------------------------------------------------

    def configure_hardware(self) -> None:
        """Create publishers (`create_lifecycle_publisher`) and subscriptions; raise HardwareError to refuse."""

    def activation_check(self) -> str | None:
        """Return why the node may not be activated now (e.g. "no joint_states for 3 s"), or None."""
        return None

    def on_hardware_activate(self) -> None:
        """Called on activation, after the check and before the first control_step (e.g. take the
        measured pose as target). Raise HardwareError to refuse."""

    def cleanup_hardware(self) -> None:
        """Undo configure_hardware."""

    def control_step(self, verdict: StopReason) -> None:
        """Send the commanded output when `verdict.allows_motion`, else the safe output (zero /
        hold / land). Called every control period while active, at once on an e-stop or a
        command timeout, and with `StopReason.INACTIVE` once when deactivating."""
        raise NotImplementedError

    def diagnostic_values(self) -> dict[str, Any]:
        """Extra key -> value pairs for /diagnostics."""
        return {}

    # ---- helpers for subclasses ------------------------------------------------------------------

    def now(self) -> float:
        """The gate's time base (monotonic seconds)."""
        return time.monotonic()

    def create_checked_subscription(self, msg_type: Any, topic: str, callback: Callable[[Any], None],
                                    qos_profile: Any, name: str | None = None):
        """A subscription whose callback may raise `Rejected` (counted per reason and per input);
        any other exception is counted as reason "error" and logged, never crashing the node."""
        label = name or topic.strip("/").replace("/", "_") or "input"

        def checked(msg: Any) -> None:
            self.input_counts[label] += 1
            self._current_input = label
            try:
                callback(msg)
            except Rejected as exc:
                self.reject(exc.reason, f"{label}: {exc}", label)
            except ValueError as exc:  # e.g. clamp_box / limit_step refusing NaN
                self.reject("invalid", f"{label}: {exc}", label)
            except Exception as exc:  # noqa: BLE001 - a malformed message must never kill a hardware node
                self.reject("error", f"{label}: {type(exc).__name__}: {exc}", label)
                self.get_logger().error(f"{label} callback failed: {traceback.format_exc()}",
                                        throttle_duration_sec=5.0)
            finally:
                self._current_input = ""

        return self.create_subscription(msg_type, topic, checked, qos_profile)

    def reject(self, reason: str, detail: str = "", input_name: str = "") -> None:
        """Counts a refused message (`reason`) on the gate and per input, and logs it (throttled)."""
        self.gate.reject(reason)
        if input_name:
            self.input_rejections[input_name] += 1
            self.input_last_reject[input_name] = detail or reason
        self.get_logger().warning(f"rejected {detail or reason}", throttle_duration_sec=2.0)

    def check_stamp(self, stamp: Any, max_age_s: float = 0.0) -> float:
        """Validates a header stamp against this node's clock; returns its age in seconds.
        Raises Rejected("bad_stamp") for zero/negative/non-normalised stamps, ("future_stamp") for
        stamps beyond `stamp_future_tolerance_s`, ("old_stamp") for ages above `max_age_s` (> 0)."""
        if stamp.sec < 0 or stamp.nanosec >= 1_000_000_000 or (stamp.sec == 0 and stamp.nanosec == 0):
            raise Rejected("bad_stamp", f"stamp {stamp.sec}.{stamp.nanosec:09d} is zero, negative or malformed")
        age = (self.get_clock().now().nanoseconds - stamp_to_ns(stamp)) * 1e-9
        if age < -self.params["stamp_future_tolerance_s"]:
            raise Rejected("future_stamp", f"stamp is {-age:.3f} s in the future")
        if max_age_s > 0 and age > max_age_s:
            raise Rejected("old_stamp", f"stamp is {age:.3f} s old (limit {max_age_s:g} s)")
        return age

    def accept_command(self, stamp_age_s: float | None = None) -> bool:
        """Tell the gate a valid command arrived (False: refused as late, already counted) and
        re-arm the command watchdog."""
        if not self.gate.on_command(self.now(), stamp_age_s):  # counted by the gate as rejected + late
            if self._current_input:
                self.input_rejections[self._current_input] += 1
                self.input_last_reject[self._current_input] = f"late: {stamp_age_s:.3f} s old"
            self.get_logger().warning(f"rejected late command ({stamp_age_s:.3f} s old)", throttle_duration_sec=2.0)
            return False
        if self.gate.command_expires_at() is not None:
            self._watchdog_timer.reset()
        return True

    def state_received(self) -> None:
        """Tell the gate a valid measurement of the robot's state arrived."""
        self.gate.on_state(self.now())

    @property
    def is_active(self) -> bool:
        return self.lifecycle_state == "active"

    # ---- lifecycle -------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.configure_hardware()
        except Exception as exc:  # noqa: BLE001 - rclpy would swallow it without a word
            return self._refuse("configure", exc)
        ret = super().on_configure(state)
        if ret == TransitionCallbackReturn.SUCCESS:
            self.lifecycle_state = "inactive"
            self.get_logger().info("configured")
        return ret

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            refusal = self.activation_check()
        except Exception as exc:  # noqa: BLE001
            refusal = f"{type(exc).__name__}: {exc}"
        if refusal:
            self.activation_refusal = refusal
            self.get_logger().error(f"refusing to activate: {refusal}", throttle_duration_sec=5.0)
            return TransitionCallbackReturn.FAILURE
        ret = super().on_activate(state)  # enables the lifecycle publishers
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        try:
            self.on_hardware_activate()
        except Exception as exc:  # noqa: BLE001
            super().on_deactivate(state)
            return self._refuse("activate", exc)
        self.activation_refusal = ""
        self.gate.set_active(True, self.now())
        self.lifecycle_state = "active"
        self.get_logger().info("activated: commanding the hardware")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_commanding()
        self.lifecycle_state = "inactive"
        self.get_logger().info("deactivated")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.cleanup_hardware()
        except Exception as exc:  # noqa: BLE001
            return self._refuse("cleanup", exc)
        self.lifecycle_state = "unconfigured"
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_commanding()
        self.lifecycle_state = "finalized"
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_commanding()
        self.lifecycle_state = "unconfigured"
        return super().on_error(state)

    def close(self) -> None:
        """Called by `run_node` on the way out: one last safe output if still active."""
        if self.is_active:
            try:
                self.trigger_deactivate()
            except Exception as exc:  # noqa: BLE001 - the context may already be shut down (SIGINT)
                self.get_logger().warning(f"could not deactivate cleanly: {exc}")

    def _refuse(self, what: str, exc: BaseException) -> TransitionCallbackReturn:
        self.activation_refusal = str(exc)
        self.get_logger().error(f"refusing to {what}: {exc}")
        return TransitionCallbackReturn.FAILURE

    def _stop_commanding(self) -> None:
        if self.gate.active:
            self.gate.set_active(False, self.now())
            self._run_step(StopReason.INACTIVE)  # last safe output while the publishers are enabled

    def _autostart(self) -> None:
        if self.lifecycle_state == "active":
            self._autostart_timer.cancel()
            return
        now = self.now()
        if now - self._last_activation_attempt < self.params["activation_retry_s"]:
            return
        self._last_activation_attempt = now
        if self.lifecycle_state == "unconfigured":
            self.trigger_configure()
        if self.lifecycle_state == "inactive":
            self.trigger_activate()
        if self.lifecycle_state == "active":
            self._autostart_timer.cancel()

    # ---- safety plumbing -------------------------------------------------------------------------

    def _run_step(self, verdict: StopReason) -> None:
        self.last_verdict = verdict
        self.step_counts[verdict.value] += 1
        try:
            self.control_step(verdict)
        except Exception as exc:  # noqa: BLE001 - logged and counted; the next period tries again
            self.control_errors += 1
            self._last_control_error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"control_step failed: {traceback.format_exc()}", throttle_duration_sec=5.0)

    def _on_control_timer(self) -> None:
        if self.is_active:
            self._run_step(self.gate.verdict(self.now()))

    def _on_watchdog(self) -> None:
        self._watchdog_timer.cancel()
        if not self.is_active:
            return
        verdict = self.gate.verdict(self.now())
        if verdict is not StopReason.NONE and self.last_verdict is StopReason.NONE:
            self._run_step(verdict)  # the command just expired: safe output now

    def _on_estop(self, msg: Bool) -> None:
        self.input_counts["estop"] += 1
        now = self.now()
        if self.gate.on_estop(bool(msg.data), now):
            self.get_logger().error(f"E-STOP: {self.gate.verdict(now).value}; holding until ~/reset_estop")
        if self.is_active:
            verdict = self.gate.verdict(now)
            if verdict.is_estop and self.last_verdict is not verdict:
                self._run_step(verdict)  # obey now, not at the next control period

    def _on_reset_estop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        ok, why = self.gate.reset_estop(self.now())
        if ok:
            self.get_logger().info(f"reset_estop: {why}")
        else:
            self.get_logger().warning(f"reset_estop refused: {why}")
        response.success, response.message = ok, why
        return response

    # ---- diagnostics -----------------------------------------------------------------------------

    def publish_diagnostics(self) -> None:
        now = self.now()
        verdict = self.gate.verdict(now)
        values: dict[str, Any] = {"lifecycle": self.lifecycle_state, "verdict": verdict.value,
                                  "activation_refusal": self.activation_refusal, **self.gate.status(now),
                                  "control_errors": self.control_errors}
        for name, count in sorted(self.input_counts.items()):
            values[f"rx_{name}"] = count
            values[f"rejected_{name}"] = self.input_rejections.get(name, 0)
        for reason, count in sorted(self.gate.reject_reasons.items()):
            values[f"reject_reason_{reason}"] = count
        for reason, count in sorted(self.step_counts.items()):
            values[f"steps_{reason}"] = count
        try:
            values.update(self.diagnostic_values())
        except Exception as exc:  # noqa: BLE001
            values["diagnostic_values_error"] = repr(exc)
        if self.gate.estop_latched or verdict.is_estop or self.control_errors:
            level = _ERROR
        elif self.lifecycle_state != "active" or verdict is StopReason.NO_STATE:
            level = _WARN
        else:
            level = _OK
        message = verdict.value if self.lifecycle_state == "active" else self.lifecycle_state
        if self.activation_refusal:
            message += f"; activation refused: {self.activation_refusal}"
        if self._last_control_error:
            message += f"; last control error: {self._last_control_error}"
        self._diag_pub.publish(diagnostics(self, values, level, message))
