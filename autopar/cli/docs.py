"""Generate docs/cli.md from the commands' --help (checked by tests/cli/test_docs.py).

    .venv/bin/python -m autopar.cli.docs > docs/cli.md
"""

from __future__ import annotations

import click

from autopar.cli import main


def reference() -> str:
    out = ["# autopar command reference", "", "Generated from `--help` by `python -m autopar.cli.docs`; do not edit.", ""]

    def walk(command: click.Command, name: str, parent: click.Context | None, path: list[str]) -> None:
        # contexts nest as on the command line, so inherited settings (-h) show the same way
        settings = {**command.context_settings, "terminal_width": 100, "max_content_width": 100}
        with click.Context(command, info_name=name, parent=parent, **settings) as ctx:
            out.extend([f"## {' '.join(path)}", "", "```", command.get_help(ctx), "```", ""])
            if isinstance(command, click.Group):
                for sub in command.list_commands(ctx):  # loads lazily registered commands
                    walk(command.get_command(ctx, sub), sub, ctx, path + [sub])

    walk(main, "autopar", None, ["autopar"])
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(reference(), end="")
