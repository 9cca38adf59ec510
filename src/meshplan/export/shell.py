"""Shell text from untrusted values: every value a launch script receives is one quoted word.

A model name or path comes from the user (a CLI flag, a model file, a web form) and may hold
`$(...)`, backticks, `;`, quotes or a newline. Written into a script it must stay one literal
argument, and written into a `# ...` comment it must not end the comment.
"""

from __future__ import annotations

import shlex


class Raw(str):
    """Shell text written as is (already quoted or meant to expand)."""


def word(value: object) -> str:
    """`value` as one shell word (a Raw value as is; a float in %g form)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float):
        return shlex.quote(f"{value:g}")
    return shlex.quote(str(value))


def comment_text(text: object) -> str:
    """`text` safe inside a `# ...` comment line: control characters (a newline would end the
    comment and start a command) written as escapes."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))
