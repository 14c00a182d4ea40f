"""The `autopar` command line: a thin click layer. Every failure ends as one line on stderr,
`Error: <field>=<value>: <rule>`, and a non-zero exit (autopar/cli/failure.py); no cost logic
lives here.

Commands load lazily: `autopar --version` and `--help` import no command module (the cost
model, OR-Tools and Optuna take seconds to import); a command's module loads when it runs."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from autopar import __version__

# name -> (module that attaches the command to `main`, the text `autopar --help` shows: the
# first paragraph of the command's docstring, checked by tests/cli/test_lazy.py). Register a new
# command with one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("autopar.cli.calibrate", "Fit cost-model coefficients from measurements and write a calibration profile (YAML)."),
    "comm": ("autopar.cli.comm", "Predicted time, algbw and busbw of one collective over a group placed on the cluster, "
                                 "and the NCCL algorithm and protocol it runs: NCCL's own pick, the smallest of its tuning model's estimates."),
    "emit": ("autopar.cli.emit", "Write runnable launcher configs for a plan of RESULTS.json (from `autopar search --out`)."),
    "estimate": ("autopar.cli.estimate", "Predict step time, throughput, MFU and memory of one plan."),
    "plan": ("autopar.cli.plan", "From a token budget to GPUs, batch, layout, days, dollars and MWh (failures priced in)."),
    "search": ("autopar.cli.search", "Search the plan space and rank the fastest (or cheapest) plans that fit."),
    "sweep": ("autopar.cli.sweep", "Run a sweep of searches (models x clusters x GPUs x sequence lengths x batches)."),
    "tune": ("autopar.cli.tune", "Refine the best predicted plans against measured step times (Optuna study)."),
    "validate": ("autopar.cli.validate", "Predict published training runs and report per-row, per-source and per-family error (MAPE)."),
}


def _available(name: str) -> bool:
    try:
        return importlib.util.find_spec(COMMANDS[name][0]) is not None
    except ModuleNotFoundError:
        return False


class _Group(click.Group):
    """Lazy commands, and the single error path around every invocation."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | {n for n in COMMANDS if _available(n)})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS and _available(name):
            importlib.import_module(COMMANDS[name][0])  # the module attaches its command to main
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)  # as click.Group.format_commands
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None and loaded.hidden:
                continue
            stand_in = loaded or click.Command(name, help=COMMANDS[name][1])  # same shortening as the real command
            rows.append((name, stand_in.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        from autopar.cli.failure import debug, fail, signals_raise

        argv = list(sys.argv[1:] if args is None else args)
        try:
            with signals_raise():
                code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except SystemExit:
            raise
        except click.exceptions.NoArgsIsHelpError as exc:  # `autopar` or `autopar calibrate` alone: the help
            click.echo(exc.ctx.get_help() if exc.ctx else self.get_help(click.Context(self)))
            sys.exit(0)
        except BrokenPipeError:  # `autopar search ... | head`: the reader left; say nothing
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115  (the interpreter flushes stdout at exit)
            sys.exit(141)
        except BaseException as exc:  # noqa: BLE001  (the one place every failure is reported)
            if debug() and not isinstance(exc, (click.ClickException,)):
                raise
            sys.exit(fail(exc, argv))
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autopar")
def main() -> None:
    """Find, explain and launch the fastest parallel plan for training a transformer."""


if __name__ == "__main__":  # pragma: no cover
    main()
