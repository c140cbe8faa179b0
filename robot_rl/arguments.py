"""What every `robot-rl` subcommand parses the same way: number types with bounds, the shared
flags, `--set` settings, and a parser whose usage errors are one line."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from robot_rl.outputs import TEMP_PREFIX, UserError, atomic_path, check_output


def parse_settings(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--set expects node.param=value, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def name_equals_numbers(text: str) -> tuple[str, float | list[float]]:
    """An argparse type: NAME=VALUE with a number or comma-separated numbers (`restitution=0.7`,
    `ball_start_offset=0,0,0.8`); the name is checked by whoever takes it."""
    name, sep, value = text.partition("=")
    try:
        numbers = [float(v) for v in value.split(",")]
    except ValueError:
        numbers = []
    if not (sep and name) or not numbers:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER or NAME=N1,N2,..., got {text!r}")
    return name, numbers[0] if len(numbers) == 1 else numbers


def at_least(minimum: int | float, kind: type = int):
    """An argparse type: a number of `kind` no smaller than `minimum` (a negative count, a zero
    trial length ... are refused at parse time with the flag named)."""
    def parse(text: str):
        value = kind(text)  # a ValueError here: argparse says "invalid int value: 'x'"
        if not value >= minimum:  # NaN too
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def in_range(low: float, high: float):
    """An argparse type: a float in [low, high] (NaN refused)."""
    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {text}")
        return value
    parse.__name__ = "float"
    return parse


def port_arg(text: str) -> int:
    """An argparse type: a TCP port to listen on (1-65535)."""
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {text}")
    return port


def domain_id_arg(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 232:  # the DDS port mapping leaves 0-232 on Linux
        raise argparse.ArgumentTypeError(f"a ROS_DOMAIN_ID is 0-232, got {text}")
    return value


class Parser(argparse.ArgumentParser):
    """Usage mistakes as one line (exit 2), like every other refused input."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def overwrite_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--overwrite", action="store_true", help=f"replace {what} if it exists (refused otherwise)")


def dataset_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--append", action="store_true",
                        help="add to an existing dataset (same schema and task; refused otherwise)")
    overwrite_flag(parser, "an existing dataset")


def dataset_out(args: argparse.Namespace) -> Path:
    """--out of a command writing a dataset: an existing one is refused unless --append or --overwrite."""
    return check_output(args.out, "dataset", overwrite=args.overwrite, append=args.append, appendable=True)


def recording_path(args: argparse.Namespace, out: Path) -> Path:
    """Where a session records: `out` itself (episode by episode), or, replacing a dataset (--overwrite),
    a new one beside it that `replace_dataset` swaps in when the session ends (the old one stays until then)."""
    return out.with_name(f"{TEMP_PREFIX}{out.name}-{os.getpid()}") if args.overwrite and out.exists() else out


def replace_dataset(out: Path, recording: Path) -> None:
    """Puts the dataset a session recorded in place of `out` (one directory swap)."""
    if not recording.exists():
        print(f"robot_rl: nothing was recorded; {out} is unchanged", flush=True)
        return
    with atomic_path(out, directory=True) as swap:
        os.replace(recording, swap)


def command_line(argv: Sequence[str], drop: Mapping[str, bool], add: Sequence[str]) -> str:
    """`robot-rl` with the arguments `argv` less the flags in `drop` (flag -> whether it takes a value, given
    as `--flag VALUE` or `--flag=VALUE`) and with `add` at the end, quoted for a shell: the command that
    carries on where an interrupted one stopped."""
    kept, skip = [], False
    for arg in argv:
        flag = arg.partition("=")[0]
        if skip:
            skip = False
        elif flag in drop:
            skip = drop[flag] and "=" not in arg
        else:
            kept.append(arg)
    return shlex.join(["robot-rl", *kept, *add])
