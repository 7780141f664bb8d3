"""argv lists (remedy.core.commands) as pyinfra commands, every element quoted."""

from __future__ import annotations

from pyinfra.api import QuoteString, StringCommand


def command(argv: list[str]) -> StringCommand:
    return StringCommand(*(QuoteString(a) for a in argv))


def run(host, argv: list[str]) -> tuple[bool, str]:
    """Run ARGV on HOST now (inside a FunctionCommand); (ok, combined output)."""
    ok, output = host.run_shell_command(command(argv), print_output=False)
    text = (
        "\n".join(line.line for line in output.combined_lines)
        if hasattr(output, "combined_lines")
        else "\n".join(output.stdout_lines + output.stderr_lines)
    )
    return ok, text
