"""Bash word expansion for `bash_resolve`: a word -> its fields, with the lines its variables were
set on. Parameters (`$V`, `${V:-d}`, `${V:=d}`, `${V:+alt}`, `${#V}`, `${A[i]}`), arrays
(`"${A[@]}"`), `"$@"`, quoting and `$((arithmetic))`. Command substitutions stay literal and are
reported in `notes`; nothing runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topl.launcher.importer.lex import arith, word_piece_end

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGIT = re.compile(r"\d")
_IFS = re.compile(r"[ \t\n]+")
_RUN = re.compile(r"[^\"'\\\\$`]+")

# What the reading may build (issue 48: a script doubling a variable 26 times built 64 MB and then
# hung in the override parser). A value is at most as long as the longest script read (literal
# values pass whole); everything expanded together a few times that; arrays a bounded count.
MAX_VALUE_CHARS = 1_000_000
MAX_BUILT_CHARS = 8_000_000
MAX_ITEMS = 100_000


class TooLarge(ValueError):
    """The script builds more than the reader builds (a value, all values, an array's length)."""

    def __init__(self, what: str, line: int):
        self.what, self.line = what, line
        super().__init__(f"line {line}: {what}")


@dataclass
class Item:
    """One resolved word: its text, the line it is written on, the lines its variables came from."""

    text: str
    line: int
    deps: tuple[int, ...] = ()


class Expander:
    """Variables, positional arguments and the notes of what was not resolved, by line."""

    def __init__(self, env: dict[str, str], args: list[str]):
        self.vars: dict[str, Item | list[Item]] = {k: Item(v, 0) for k, v in env.items()}
        self.args = [Item(a, 0) for a in args]
        self.notes: list[tuple[int, str]] = []
        self.substituted = False  # set when a command substitution was met (kept literally)
        self.built = 0  # characters and elements built so far, against MAX_BUILT_CHARS

    def grow(self, n: int, line: int) -> None:
        """Count n more characters (or elements) built; past the budget, stop reading."""
        self.built += n
        if self.built > MAX_BUILT_CHARS:
            raise TooLarge(f"more than {MAX_BUILT_CHARS:,} characters in all", line)

    def items(self, v: list[Item], line: int) -> list[Item]:
        """A copy of an array's elements, counted (copies are what a doubling script multiplies)."""
        if len(v) > MAX_ITEMS:
            raise TooLarge(f"an array of more than {MAX_ITEMS:,} elements", line)
        self.grow(len(v) + sum(len(it.text) for it in v), line)
        return list(v)

    def scalar(self, name: str) -> Item | None:
        v = self.vars.get(name)
        return (v[0] if v else None) if isinstance(v, list) else v

    def expand(self, raw: str, line: int, split: bool = True) -> list[Item]:
        """A word -> its fields (several for `"${A[@]}"`, `"$@"` and unquoted spaces)."""
        bare = raw[1:-1] if len(raw) > 1 and raw[0] == raw[-1] == '"' else raw
        if bare in ("$@", "$*"):
            return self.items(self.args, line)
        m = re.fullmatch(r"\$\{([A-Za-z_]\w*)\[[@*]\]\}", bare)
        if m:  # the array's own elements, each with the line it is written on
            v = self.vars.get(m.group(1))
            return self.items(v, line) if isinstance(v, list) else [v] if v else []
        fields: list[list] = [[[], False]]  # pieces of text (joined once: linear), has-content
        deps: list[int] = []
        size = [0]  # characters of this word so far, against MAX_VALUE_CHARS

        def add(text, quoted, items=None):
            n = len(text) if items is None else len(items) + sum(len(it.text) for it in items)
            size[0] += n
            if size[0] > MAX_VALUE_CHARS:
                raise TooLarge(f"a value of more than {MAX_VALUE_CHARS:,} characters", line)
            self.grow(n, line)
            if len(fields) > MAX_ITEMS:
                raise TooLarge(f"a word of more than {MAX_ITEMS:,} fields", line)
            if items is not None:  # an array inside a longer word: its elements as fields
                texts = [it.text for it in items]
                if texts:
                    fields[-1][0].append(texts[0])
                    fields[-1][1] = True
                    fields.extend([[t], True] for t in texts[1:])
                return
            if quoted or not split:
                fields[-1][0].append(text)
                fields[-1][1] = fields[-1][1] or quoted or bool(text)
                return
            parts = _IFS.split(text)
            fields[-1][0].append(parts[0])
            fields[-1][1] = fields[-1][1] or bool(parts[0])
            fields.extend([[p], True] for p in parts[1:])

        i, n, quoted = 0, len(raw), False
        while i < n:
            c = raw[i]
            if c == '"':
                quoted = not quoted
                fields[-1][1] = True
                i += 1
            elif c == "'" and not quoted:
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                add(raw[i + 1 : j], True)
                i = j + 1
            elif c == "\\" and i + 1 < n:
                add(raw[i + 1], True)
                i += 2
            elif c == "$" and raw.startswith("$((", i):
                j = word_piece_end(raw, i, line)
                try:
                    add(str(arith(raw[i + 3 : j - 2], lambda k: self._val(k, deps))), quoted)
                except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
                    self.notes.append((line, f"arithmetic {raw[i:j]} not resolved"))
                    add(raw[i:j], quoted)
                i = j
            elif c == "$" and raw[i + 1 : i + 2] == "(" or c == "`":
                j = word_piece_end(raw, i, line)
                self.notes.append(
                    (line, f"command substitution {raw[i:j]} not run (kept literally)")
                )
                self.substituted = True
                add(raw[i:j], quoted)
                i = j
            elif c == "$" and raw[i + 1 : i + 2] == "{":
                j = word_piece_end(raw, i, line)
                text, items = self._param(raw[i + 2 : j - 1], line, deps)
                add(text, quoted, items)
                i = j
            elif c == "$" and raw[i + 1 : i + 2] in ("@", "*"):
                add("", quoted, list(self.args))
                i += 2
            elif c == "$" and (m := _NAME.match(raw, i + 1) or _DIGIT.match(raw, i + 1)):
                add(self._val(m.group(0), deps, line), quoted)
                i = m.end()
            else:
                m = _RUN.match(raw, i)  # a run of plain characters at once
                j = m.end() if m else i + 1
                add(raw[i:j], True)  # literal text: never split
                i = j
        dl = tuple(sorted({d for d in deps if d}))
        out = []
        for pieces, has in fields:
            t = "".join(pieces)
            if has or t:
                out.append(Item(t, line, dl))
        return out

    def _val(self, name: str, deps: list[int], line: int | None = None) -> str:
        if name.isascii() and name.isdigit():  # $1..; str.isdigit also takes "²"
            return self.args[int(name) - 1].text if 0 < int(name) <= len(self.args) else ""
        v = self.scalar(name)
        if v is None:
            if line is not None:  # left for the user's environment, not guessed
                self.notes.append((line, f"${name} is not set by the script (kept as ${name})"))
                return "$" + name
            return ""
        deps.extend([v.line, *v.deps] if v.line else v.deps)
        return v.text

    def _param(self, body: str, line: int, deps: list[int]):
        m = re.match(
            r"^([A-Za-z_][A-Za-z0-9_]*|\d+)(\[(@|\*|\d+)\])?(:?[-=+?])?(.*)$", body, re.DOTALL
        )
        if body.startswith("#"):
            v = self.vars.get(body[1:].split("[")[0])
            return str(len(v) if isinstance(v, list) else len(v.text) if v else 0), None
        if not m:
            self.notes.append((line, f"${{{body}}} not resolved"))
            return "${" + body + "}", None
        name, index, op, rest = m.group(1), m.group(3), m.group(4), m.group(5)
        v = self.vars.get(name)
        if index in ("@", "*"):
            items = v if isinstance(v, list) else ([v] if v else [])
            return "", [Item(it.text, it.line, it.deps) for it in items]
        if index is not None:
            items = v if isinstance(v, list) else ([v] if v else [])
            v = items[int(index)] if int(index) < len(items) else None
        elif isinstance(v, list):
            v = v[0] if v else None
        unset = v is None or (op or "").startswith(":") and not v.text
        if op and op.lstrip(":") in "-=":
            if not unset:
                deps.extend([v.line, *v.deps])
                return v.text, None
            inner = self.expand(rest, line, split=False)
            deps.extend(d for it in inner for d in it.deps)
            alt = " ".join(it.text for it in inner)
            if op.lstrip(":") == "=":
                self.vars[name] = Item(alt, line, tuple(deps))
            return alt, None
        if op and op.lstrip(":") == "+":
            return ("" if unset else " ".join(it.text for it in self.expand(rest, line))), None
        if v is None:
            return self._val(name, deps, line), None
        deps.extend([v.line, *v.deps])
        return v.text, None
