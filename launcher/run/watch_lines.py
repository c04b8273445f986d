"""Lines of a run's files as data: `Tail` reads a growing file whole, in bounded chunks, never
through a FIFO or a link; `parse_metric` / `parse_console` turn a metrics.jsonl line or a verl
console line into (step, its numbers)."""

from __future__ import annotations

import codecs
import json
import math
import os
import re
from pathlib import Path
from typing import Iterator

from topl.launcher.run import watch_io

_CONSOLE = re.compile(r"^(?:\([^)]*\) )?step:(\d+) - (.*)$")  # Ray prefixes "(Actor pid=N) "


def parse_console(line: str) -> tuple[int, dict] | None:
    m = _CONSOLE.match(line.strip())
    if not m or len(m.group(1)) > MAX_STEP_DIGITS:
        return None
    data = {}
    for part in m.group(2).split(" - "):
        k, _, v = part.rpartition(":")
        try:
            data[k] = float(v)
        except ValueError:
            continue
    return int(m.group(1)), data


MAX_STEP_DIGITS = 18  # a step number is an int64; a longer one is not a step


def parse_metric(line: str) -> tuple[int, dict] | None:
    """(step, its numeric metrics) of a metrics.jsonl line, or None for a blank or foreign line
    (the steps around it still count). Only numbers are kept: the step's memory is its metrics,
    whatever else a line carries; a number too large for a float is kept as inf (not exactly 0)."""
    try:
        rec = json.loads(line)
        step, data = rec["step"], rec["data"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    if isinstance(step, bool) or not isinstance(step, int) or abs(step) >= 10**MAX_STEP_DIGITS:
        return None
    if not isinstance(data, dict):
        return None
    numbers = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        try:
            numbers[k] = float(v)
        except OverflowError:  # a 400-digit int
            numbers[k] = math.inf if v > 0 else -math.inf
    return step, numbers


class Tail:
    """New complete lines of a growing file (a partial last line waits for its newline), read to
    its end in chunks of at most CHUNK_CAP: the whole file, in bounded memory."""

    def __init__(self, path: Path):
        self.path, self.ident = path, (0, 0)
        self._restart()

    def _restart(self) -> None:
        self.pos, self.buf = 0, ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a split character

    def batches(self, final: bool = False) -> Iterator[list[str]]:
        """The new complete lines, a chunk's worth at a time, up to the end of the file now.
        `final`: the run has ended, so a last line without its newline is complete too."""
        f = watch_io.open_regular(self.path)  # never a FIFO or a link
        if f is None:
            return
        yield from self._read(f)
        if final and self.buf:
            last, self.buf = self.buf, ""
            yield [last]

    def _read(self, f) -> Iterator[list[str]]:
        with f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.pos:
                # another file under the name, or this one cut short (a restarted job rewrote
                # it): read it from its start, or its new lines were lost (issue 48 probe)
                self.ident = (st.st_dev, st.st_ino)
                self._restart()
            f.seek(self.pos)
            while chunk := f.read(watch_io.CHUNK_CAP):
                self.pos = f.tell()
                *done, self.buf = (self.buf + self.decoder.decode(chunk)).split("\n")
                if len(self.buf) > watch_io.LINE_CAP:  # an endless line: keep its head only
                    done.append(self.buf[: watch_io.LINE_CAP])
                    self.buf = ""
                yield [line[: watch_io.LINE_CAP] for line in done]

    def lines(self, final: bool = False) -> list[str]:
        return [line for batch in self.batches(final) for line in batch]
