"""`sweeper`: the command line. One verb, one function; user mistakes exit 2 with one line."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from trainables.config import ConfigError, preset_names

from sweeper import trial as trial_cmd
from sweeper import validate as validate_cmd


def _add_trial(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", help="train one configuration, without Ray",
                       description="Train one trial config (a YAML file or a preset name) and print its metrics.")
    p.add_argument("config", help="trial config YAML, or a preset: " + ", ".join(preset_names()))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a field by dotted path, e.g. --set dat.switch_step=500 (repeatable)")
    p.add_argument("--steps", type=int, help="shorthand for --set steps=N")
    p.add_argument("--out", help="directory for metrics.jsonl, result.json and the latest checkpoint")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(func=trial_cmd.run)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a search-space file and show what it searches; runs nothing")
    p.add_argument("file", help="search-space YAML (search_spaces/*.yaml)")
    p.add_argument("--samples", type=int, default=3, help="sampled configs to print (default 3)")
    p.set_defaults(func=validate_cmd.run)


PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [_add_trial, _add_validate]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sweeper",
        description="Hyperparameter sweeps for Delayed Attention Training in Transformer-RNN hybrids.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add in PARSERS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
