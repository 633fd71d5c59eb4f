"""What healerctl writes to a terminal: control characters shown, never acted on.

healerctl prints text that others chose: containers' output, a registry's error text
in a pull failure, the engine's words. Written as they are, an escape sequence could
set the window title, clear the screen, hide text, or write the operator's clipboard
(OSC 52) (issue 29). On a terminal, every C0 control but newline and tab, DEL and every
C1 control is shown instead: `^[` for ESC, `^?` for DEL, `\\x9b` for CSI. Table cells
show every control so, newline and tab too, wherever the output goes (output.table).
`healerctl logs --raw`, or output that is not a terminal, keeps the bytes as they are.
"""

from __future__ import annotations

import codecs
import io
from typing import BinaryIO, TextIO, cast


def _shown(keep: str) -> dict[int, str]:
    table = {c: "^" + chr(c ^ 0x40) for c in range(0x20)}
    table[0x7F] = "^?"
    table.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
    for ch in keep:
        table.pop(ord(ch))
    return table


# For healerctl's own lines (newline and tab are layout), and for a table's cells.
_TEXT = _shown("\n\t")
_CELL = _shown("")


def visible(text: str) -> str:
    """`text` with every control character but newline and tab shown."""
    return text.translate(_TEXT)


def cell(value: object) -> str:
    """A table cell: every control character shown, newline and tab too."""
    return "" if value is None else str(value).translate(_CELL)


class VisibleText(io.TextIOBase):
    """A terminal's text stream that shows control characters (visible) rather than
    passing them; `inner` is the terminal's own stream."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner

    def write(self, s: str) -> int:
        self.inner.write(visible(s))
        return len(s)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return True


def on_terminal(stream: TextIO) -> TextIO:
    """`stream`, wrapped in VisibleText if it is a terminal."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    return cast(TextIO, VisibleText(stream)) if tty else stream


class LogText:
    """A container's output for a terminal, chunk by chunk: UTF-8 decoded across the
    chunks' edges (a byte that is not UTF-8 becomes U+FFFD), newline, tab and CR LF kept
    (a TTY container writes CR LF), every other control shown (a lone CR as `^M`)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._cr = False  # a CR at a chunk's end: whether LF follows is not known yet

    def feed(self, data: bytes, final: bool = False) -> str:
        text = ("\r" if self._cr else "") + self._decoder.decode(data, final)
        self._cr = not final and text.endswith("\r")
        if self._cr:
            text = text[:-1]
        return "\r\n".join(part.translate(_TEXT) for part in text.split("\r\n"))


class LogWriter:
    """Writes a container's output to `out`: shown for a terminal (LogText) when
    `render`, else the bytes as they are (to the stream's binary buffer; a stream that
    has none, a test's, gets them decoded)."""

    def __init__(self, out: TextIO, render: bool) -> None:
        self.out = out.inner if isinstance(out, VisibleText) else out
        self._text = LogText() if render else None
        binary = getattr(self.out, "buffer", None)
        self._binary: BinaryIO | None = None if render else binary
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.out.flush()

    def write(self, data: bytes) -> None:
        if self._text is not None:
            self.out.write(self._text.feed(data))
        elif self._binary is not None:
            self._binary.write(data)
        else:
            self.out.write(self._decoder.decode(data))

    def flush(self, final: bool = False) -> None:
        if self._text is not None:
            self.out.write(self._text.feed(b"", final))
        elif self._binary is None:
            self.out.write(self._decoder.decode(b"", final))
        (self._binary or self.out).flush()


__all__ = ["LogText", "LogWriter", "VisibleText", "cell", "on_terminal", "visible"]
