"""The one error path of the command line: any failure becomes ONE line on stderr,
`Error: <field>=<value>: <rule>`, and a non-zero exit code -- 1 for bad input and failed work,
130 / 143 when SIGINT / SIGTERM stopped the run. Never a traceback (AUTOPAR_DEBUG=1 re-raises
unexpected errors for a bug report)."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from autopar.errors import AutoparError, Missing, one_line, short_value

EXIT_FAILURE = 1


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwinds like KeyboardInterrupt (finally blocks run, workers
    are stopped) but is not swallowed by code that catches Exception."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


@contextmanager
def signals_raise() -> Iterator[None]:
    """While the command runs, SIGINT and SIGTERM raise Interrupted in the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _option_value(args: list[str], opts: list[str]) -> object:
    """The text given for an option on the command line (for the message), else Missing."""
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(opt + "="):
                return arg[len(opt) + 1:]
    return Missing()


def _param_field(param: click.Parameter | None, hint: object) -> str:
    """The name a user typed: `cluster` for --cluster, `runs` for the RUNS argument."""
    if isinstance(param, click.Option) and param.opts:
        return max(param.opts, key=len).lstrip("-")
    if param is not None and param.name:
        return param.name.replace("_", "-")
    return str(hint or "argument").strip("'\"").lstrip("-")


def _usage_message(exc: click.UsageError, args: list[str]) -> str:
    """click's usage errors (3 lines, exit 2) as one `field=value: rule` line."""
    if isinstance(exc, click.NoSuchOption):
        did = f" (did you mean {', '.join(exc.possibilities)}?)" if exc.possibilities else ""
        return f"option={short_value(exc.option_name)}: no such option{did}; see --help"
    if isinstance(exc, click.exceptions.NoSuchCommand):
        return f"command={short_value(exc.command_name)}: {one_line(exc.format_message())} See autopar --help"
    if isinstance(exc, click.MissingParameter):
        param = exc.param
        kind = "argument" if isinstance(param, click.Argument) else "option"
        name = max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name if param else "value"
        return f"{_param_field(param, exc.param_hint)}=(missing): required {kind} {name}"
    if isinstance(exc, click.BadParameter):
        param = exc.param
        value = _option_value(args, list(param.opts)) if isinstance(param, click.Option) else Missing()
        rule = one_line(exc.message)
        shown = short_value(value)
        for prefix in (shown, str(value)):
            if rule.startswith(prefix):
                rule = rule[len(prefix):].lstrip(" :")
                break
        return f"{_param_field(param, exc.param_hint)}={shown}: {rule}"
    if isinstance(exc, click.BadOptionUsage):
        return f"{exc.option_name.lstrip('-')}={short_value(_option_value(args, [exc.option_name]))}: {one_line(exc.message)}"
    return f"arguments={short_value(' '.join(args))}: {one_line(exc.format_message())}"


def message_for(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """(one line after `Error: `, exit code) for any exception that ends a command."""
    from pydantic import ValidationError

    if isinstance(exc, Interrupted):
        return f"signal={short_value(str(exc))}: stopped; finished results were kept", exc.exit_code
    if isinstance(exc, click.UsageError):
        return _usage_message(exc, args), EXIT_FAILURE
    if isinstance(exc, click.exceptions.FileError):
        return f"file={short_value(exc.filename)}: {one_line(exc.message)}", EXIT_FAILURE
    if isinstance(exc, click.ClickException):
        return one_line(exc.format_message()), EXIT_FAILURE
    if isinstance(exc, AutoparError):
        return one_line(str(exc)), EXIT_FAILURE
    if isinstance(exc, ValidationError):
        from autopar.errors import InputError

        return one_line(str(InputError.from_validation(exc, exc.title.lower()))), EXIT_FAILURE
    if isinstance(exc, UnicodeDecodeError):
        return f"input={short_value(exc.object[:40])}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})", EXIT_FAILURE
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else "file"
        return f"path={short_value(str(name))}: {one_line(exc.strerror or str(exc))}", EXIT_FAILURE
    if isinstance(exc, (MemoryError, RecursionError)):
        return f"input=(too large): {type(exc).__name__}: the input is too large or too deeply nested", EXIT_FAILURE
    text = one_line(str(exc)) or type(exc).__name__
    return (f"internal={type(exc).__name__}: {short_value(text, 200).strip(chr(39))} "
            "(a bug in autopar; AUTOPAR_DEBUG=1 shows the traceback)"), EXIT_FAILURE


def fail(exc: BaseException, args: list[str]) -> int:
    """Print the one line and return the exit code."""
    text, code = message_for(exc, args)
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    click.echo(f"Error: {text}", err=True)
    return code


def debug() -> bool:
    return bool(os.environ.get("AUTOPAR_DEBUG"))
