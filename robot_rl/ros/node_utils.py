"""What every robot_rl node shares: range-checked parameters, diagnostics, a clean main()."""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterValueException, ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from robot_rl.config_fields import ParameterError, check_range, closest_name, coerce_to_default, settings_of
from robot_rl.outputs import expected_failure


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    description: str
    low: float | int | None = None
    high: float | int | None = None
    choices: Sequence[str] | None = None

    def descriptor(self) -> ParameterDescriptor:
        extra = f" One of: {', '.join(self.choices)}." if self.choices else ""
        if self.low is not None and self.high is not None and isinstance(self.default, (list, tuple)):
            # ROS ranges are for scalars; an array's is checked element by element (check_bounds) and stated here
            extra += f" Each element in [{self.low}, {self.high}]."
        d = ParameterDescriptor(description=self.description + extra)
        if self.low is not None and self.high is not None and not isinstance(self.default, (list, tuple)):
            if isinstance(self.default, bool):
                raise TypeError(f"{self.name}: a bool parameter cannot have a range")
            if isinstance(self.default, int):
                d.integer_range = [IntegerRange(from_value=int(self.low), to_value=int(self.high), step=0)]
            else:
                d.floating_point_range = [FloatingPointRange(from_value=float(self.low), to_value=float(self.high),
                                                             step=0.0)]
        return d


# One thread: a node's forward passes are too small to gain from more, and on a machine whose cores
# the other nodes use, OpenMP teams of several processes competing for them stall each other.
TORCH_THREADS = Param("torch_threads", 1, "CPU threads for torch in this node (leave the cores to the other "
                      "nodes of the graph).", 1, 256)


def set_torch_threads(threads: int) -> None:
    """Applies the `torch_threads` parameter (torch imported here: not every node that declares it needs torch
    before it runs a policy)."""
    import torch

    torch.set_num_threads(threads)


def params_from_dataclass(cls: type, exclude: Sequence[str] = (), defaults: dict[str, Any] | None = None,
                          only: Sequence[str] | None = None) -> list[Param]:
    """A Param for each field of config dataclass `cls` made with `robot_rl.config_fields.setting`,
    named as the field and declared by it (a None default becomes the setting's `unset` value, a
    tuple a list), except the fields in `exclude`, or only those in `only` (a node that takes a few
    settings of another core's config, such as the actor's `action_scale`); `defaults` gives this
    node's own defaults."""
    defaults = defaults or {}
    unknown = (set(exclude) | set(defaults) | set(only or ())) - set(settings_of(cls))
    if unknown:
        raise KeyError(f"{cls.__name__} has no setting {sorted(unknown)[0]!r}")
    params = []
    for name, (field, s) in settings_of(cls).items():
        if name in exclude or (only is not None and name not in only):
            continue
        default = defaults.get(name, s.unset if field.default is None else field.default)
        params.append(Param(name, list(default) if isinstance(default, tuple) else default, s.description,
                            s.low, s.high, s.choices))
    return params


def coerce_value(param: Param, value: Any) -> Any:
    """`value` as the type of `param`'s default (see `config_fields.coerce_to_default`)."""
    return coerce_to_default(param.name, param.default, value)


def check_bounds(param: Param, value: Any) -> None:
    """ParameterError when `value` (each element of a list) is outside `param`'s range or not one of its choices."""
    check_range(param.name, value, param.low, param.high, param.choices)


def declare_params(node: Node, params: Sequence[Param]) -> dict[str, Any]:
    """Declares all parameters with descriptors; raises ParameterError naming a bad value and its
    range, or a parameter given to the node (-p, --params-file) that it does not declare."""
    _coerce_overrides(node, params)
    values = {}
    for p in params:
        try:
            value = node.declare_parameter(p.name, p.default, p.descriptor()).value
        except (InvalidParameterValueException, ParameterException) as exc:
            bounds = f" (allowed range [{p.low}, {p.high}])" if p.low is not None else ""
            raise ParameterError(f"parameter {p.name!r} refused{bounds}: {exc}") from None
        check_bounds(p, value)
        values[p.name] = value
    _refuse_undeclared_overrides(node)
    return values


# rclpy keeps the -p and --params-file values for a node in `_parameter_overrides` and offers no
# public way to read or change them before they are declared.

def _coerce_overrides(node: Node, params: Sequence[Param]) -> None:
    """Converts given values to the declared types first: rclpy refuses `-p x:=0` for a float."""
    overrides = node._parameter_overrides
    for p in params:
        if p.name in overrides:
            overrides[p.name] = Parameter(p.name, value=coerce_value(p, overrides[p.name].value))


def _refuse_undeclared_overrides(node: Node) -> None:
    """A value for a parameter the node does not declare is a typo (`-p utd_rato:=2`), not a no-op."""
    declared = node.get_parameters_by_prefix("")
    unknown = sorted(name for name in node._parameter_overrides if name not in declared)
    if unknown:
        raise ParameterError(f"{node.get_name()} has no parameter {unknown[0]!r}{closest_name(unknown[0], declared)}")


def diagnostics(node: Node, values: dict[str, Any], level: bytes = DiagnosticStatus.OK,
                message: str = "ok") -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = node.get_clock().now().to_msg()
    status = DiagnosticStatus(level=level, name=node.get_fully_qualified_name(), message=message,
                              hardware_id="robot_rl")
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    msg.status = [status]
    return msg


def latency_percentiles(samples_ms, name: str = "act_latency_ms") -> dict[str, float | str]:
    """p50 and p99 of latency samples for /diagnostics ("-" before the first)."""
    if not samples_ms:
        return {f"{name}_p50": "-", f"{name}_p99": "-"}
    p50, p99 = np.percentile(np.fromiter(samples_ms, float), [50, 99])
    return {f"{name}_p50": round(float(p50), 2), f"{name}_p99": round(float(p99), 2)}


def timer_once(node: Node, period_s: float, callback: Callable[[], None], clock=None) -> None:
    """Calls `callback` once, `period_s` from now on `clock` (a steady clock for retries: with
    use_sim_time, a lockstep simulator's /clock stands still while the caller waits)."""
    def fire() -> None:
        timer.cancel()
        node.destroy_timer(timer)
        callback()
    timer = node.create_timer(period_s, fire, clock=clock)


def reset_done(response: Any, stamp_ns: int) -> Any:
    """A successful ~/reset response saying the new episode's first observation is stamped `stamp_ns` (what
    `reset_stamp` reads)."""
    response.success = True
    response.message = json.dumps({"stamp_ns": int(stamp_ns)})
    return response


def reset_stamp(response: Any) -> int | None:
    """The stamp of the first observation of a new episode from a simulator's ~/reset response
    (std_srvs/Trigger, message JSON {"stamp_ns": ...}); None when the reset failed."""
    if not response.success:
        return None
    try:
        return int(json.loads(response.message)["stamp_ns"])
    except (ValueError, KeyError, TypeError):
        return None


class ResilientExecutor(SingleThreadedExecutor):
    """A single-threaded executor that survives a message rclpy fails to take.

    rclpy's take can raise while building the Python message (pybind11's "Unable to convert call
    argument", seen under load in CI: ros2/rclpy#848); the stock executor then raises out of
    `spin_once` and the node dies. Here that message is logged with its topic and counted as lost
    (`lost_messages`), and the node goes on: the topics that must not lose data (transitions, acks,
    policies) resend until acknowledged. Errors in callbacks still end the node.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lost_messages: dict[str, int] = {}
        """Messages that could not be taken, per topic."""

    def _take_subscription(self, sub):
        try:
            return super()._take_subscription(sub)
        except RuntimeError as exc:  # rclpy's RCLError and pybind11's conversion errors are RuntimeErrors
            lost = self.lost_messages[sub.topic_name] = self.lost_messages.get(sub.topic_name, 0) + 1
            print(f"[robot_rl] lost a message on {sub.topic_name} (rclpy could not take it: {exc}); "
                  f"{lost} lost on that topic so far", file=sys.stderr, flush=True)
            return None


def run_node(factory: Callable[[], Node], args: list[str] | None = None) -> NoReturn:
    """The node process's main: initialises rclpy, spins the node until Ctrl-C/SIGTERM or until it calls
    `request_shutdown`, closes it and ends the process with its exit code (2 for refused parameters)."""
    args = args if args is not None else sys.argv
    try:
        check_params_files(args)
        rclpy.init(args=args)
    except (ValueError, RuntimeError) as exc:  # rclpy's RCLError: arguments rcl could not parse
        print(f"[robot_rl] {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        exit_without_teardown(2)
    node = None
    code = 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # `kill -USR1 <pid>` prints every thread's stack to the node's log: a hung node says where; a
    # crashing one (SIGSEGV, SIGABRT) does too.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    faulthandler.enable(all_threads=True)
    try:
        node = factory()
        node.exit_code = getattr(node, "exit_code", 0)
        node.request_shutdown = stop.set  # nodes end themselves (e.g. actor after evaluation)
        # Single-threaded on purpose: rclpy's MultiThreadedExecutor busy-polls its futures and
        # slowed a lockstep sim step from ~3 ms to ~50 ms; long work runs on the nodes' own threads.
        executor = ResilientExecutor()
        executor.add_node(node)
        while rclpy.ok() and not stop.is_set():
            try:
                executor.spin_once(timeout_sec=0.1)
            except Exception:  # noqa: BLE001
                if rclpy.ok():
                    raise
                break  # Ctrl-C shut the context down between the check and the wait: a normal stop
        code = node.exit_code
    except Exception as exc:
        # Refused parameters, and what the user's inputs cause while the node starts (a run_dir that is a file, a
        # corrupt checkpoint, a read-only disk): one line and code 2, which is not restarted. A failure once running
        # stays a crash (code 1, restarted within the node's budget).
        line = expected_failure(exc) if node is None or isinstance(exc, ParameterError) else None
        if line is None:
            raise
        print(f"[robot_rl] {line}", file=sys.stderr, flush=True)
        code = 2
    except (KeyboardInterrupt, ExternalShutdownException):
        code = 0
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    exit_without_teardown(code)


def check_params_files(args: Sequence[str]) -> None:
    """Every `--params-file FILE` among a node's ROS arguments names a readable YAML mapping; ValueError naming
    the file otherwise (rcl's own refusal is a C parser's message without the reason)."""
    import yaml

    ros_args = args[list(args).index("--ros-args") + 1:] if "--ros-args" in args else []
    for flag, value in zip(ros_args, ros_args[1:]):
        if flag != "--params-file":
            continue
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"--params-file {value}: no such file")
        try:
            params = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"--params-file {value}: not a readable YAML file ({' '.join(str(exc).split())})") \
                from None
        if not isinstance(params, dict):
            raise ValueError(f"--params-file {value}: expected a mapping of node names to ros__parameters, "
                             f"not {type(params).__name__}")


def exit_without_teardown(code: int) -> NoReturn:
    """Ends a node's process once the node is closed (its checkpoints saved, its threads stopped: every thread a
    node starts is a daemon its `close` stops) and rclpy is shut down: the exit handlers run and every output is
    flushed, but the interpreter does not tear down its ~1,800 modules (torch, mujoco, rclpy). That teardown is
    0.8 s of CPU; beside three busy processes it made an actor's stop on SIGINT take 1.8-1.9 s (0.2-0.3 s without
    it), and in a loaded CI 5.4 s, past the 5 s after which `ros2 launch` sends SIGTERM, then SIGKILL."""
    atexit._run_exitfuncs()  # noqa: SLF001 - what the interpreter's exit runs first (logging's flush among them)
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)  # the C libraries' buffered output (os._exit skips C's exit too)
    os._exit(code)
