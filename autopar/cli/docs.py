"""Generate docs/cli.md from the commands' --help (checked by tests/cli/test_docs.py).

    .venv/bin/python -m autopar.cli.docs > docs/cli.md
"""

from __future__ import annotations

import click

from autopar.cli import main


def _help(command: click.Command, path: list[str]) -> str:
    with click.Context(command, info_name=" ".join(path), terminal_width=100, max_content_width=100) as ctx:
        return command.get_help(ctx)


def reference() -> str:
    out = ["# autopar command reference", "", "Generated from `--help` by `python -m autopar.cli.docs`; do not edit.", ""]

    def walk(command: click.Command, path: list[str]) -> None:
        out.extend([f"## {' '.join(path)}", "", "```", _help(command, path), "```", ""])
        if isinstance(command, click.Group):
            for name in sorted(command.commands):
                walk(command.commands[name], path + [name])

    walk(main, ["autopar"])
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(reference(), end="")
