"""Read a bash launch script as data: resolve its variables, arrays, exports and conditionals and
return the python launches it would make (which command is one: launch.py), each argument and env
var with its line. Nothing runs: command substitutions (`$(...)`) stay literal and are reported,
unknown commands are skipped.

Covers bash as verl launch scripts are written: `NAME=value`, `export`, `NAME=(...)` / `+=(...)`,
`"${A[@]}"`, `${V:-default}` / `${V:=d}` / `${V:+alt}`, `$((arithmetic))`, `if` / `elif` / `else`
on `[ ... ]` tests, `case`, `{ ... } | tee`, line continuations, `"$@"`.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field

from topl.launcher.base.errors import ToplError
from topl.launcher.importer.expand import MAX_ITEMS, MAX_VALUE_CHARS, Expander, Item, TooLarge
from topl.launcher.importer.launch import Launch, python_launch
from topl.launcher.importer.lex import ASSIGN, BashError, glob_match, tokens

# commands that do not change what is launched: skipped without a note
_QUIET = frozenset(
    "set echo printf mkdir cat cd tee shift wait sleep ulimit trap pwd ls rm cp date".split()
)


@dataclass
class Resolved:
    launch: Launch | None  # the first launch (see `launches`; the importer picks the trainer)
    notes: list[tuple[int, str]] = field(default_factory=list)  # what was not resolved, by line
    launches: list[Launch] = field(default_factory=list)  # every python launch, in order
    exit_line: int | None = None  # where the script exits (before any launch, when launch is None)
    # variables that hold an unresolved command substitution: name -> (line, the substitution)
    unresolved: dict[str, tuple[int, str]] = field(default_factory=dict)


MAX_SCRIPT_CHARS = 1_000_000  # launch scripts are a few KB; more is not a launch script


class _Shell(Expander):
    def __init__(self, env: dict[str, str], args: list[str]):
        super().__init__(env, args)
        self.exported: set[str] = set()
        self.launches: list[Launch] = []
        self.exited = False
        self.exit_line: int | None = None
        self.unresolved: dict[str, tuple[int, str]] = {}

    # -- statements ----------------------------------------------------------------------------
    def run(self, toks):
        self.toks, self.pos = toks, 0
        self.block(stop=(), live=True)

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else ("EOF", "", 0)

    def block(self, stop: tuple, live: bool):
        while True:
            kind, text, _ = self.peek()
            if kind == "EOF" or kind == "WORD" and text in stop or kind == "OP" and text in stop:
                return
            if kind == "NL" or kind == "OP" and text in (";", "&"):
                self.pos += 1
                continue
            start = self.pos
            self.and_or(live)
            if self.pos == start:  # a stray token: step over it
                self.pos += 1

    def and_or(self, live: bool):
        status = self.pipeline(live)
        while self.peek()[:2] in (("OP", "&&"), ("OP", "||")):
            op = self.toks[self.pos][1]
            self.pos += 1
            while self.peek()[0] == "NL":
                self.pos += 1
            run = live and (status == 0 if op == "&&" else status != 0)
            s = self.pipeline(run)
            status = s if run else status
        return status

    def pipeline(self, live: bool):
        negate = self.peek()[:2] == ("WORD", "!")
        self.pos += negate
        status = self.command(live)
        while self.peek()[:2] == ("OP", "|"):
            self.pos += 1
            status = self.command(live)
        return (status == 0) if negate else status

    def command(self, live: bool) -> int:
        kind, text, line = self.peek()
        if self.exited:
            live = False
        if kind == "WORD" and text == "if":
            return self._if(live)
        if kind == "WORD" and text == "case":
            return self._case(live)
        if kind == "WORD" and text == "{":
            self.pos += 1
            self.block(stop=("}",), live=live)
            self.pos += 1
            return 0
        if kind == "OP" and text == "(":
            self.pos += 1
            self.block(stop=(")",), live=live)
            self.pos += 1
            return 0
        if kind == "WORD" and text in ("for", "while", "until", "function"):
            self.notes.append((line, f"`{text}` is not followed by the importer (skipped)"))
            self._skip_to(("done", "}"))
            return 0
        words, assigns = [], []
        while True:
            kind, text, line = self.peek()
            if kind == "OP" and text in ("REDIR", "REDIR_DONE"):
                self.pos += 1 + (text == "REDIR")
                continue
            in_test = words and words[0][0] == "[[" and words[-1][0] != "]]"
            if in_test and kind == "OP" and text in ("&&", "||"):  # inside [[ ... ]]
                words.append((text, line))
                self.pos += 1
                continue
            if kind != "WORD" or words and text in ("then", "do"):
                break
            self.pos += 1
            m = ASSIGN.match(text)
            if not words and m and self.peek()[0] == "AOPEN":
                self.pos += 1
                elems = []
                while self.peek()[:2] != ("OP", ")"):
                    k, t, ln = self._next("array `(...)`", line)
                    if k == "WORD" and live:
                        elems += self.expand(t, ln)
                assigns.append((m.group(1), m.group(2), elems, line))
                self.pos += 1
            elif not words and m:
                assigns.append((m.group(1), m.group(2), m.group(3), line))
            else:
                words.append((text, line))
        if not live:
            return 0
        if not words:
            for a in assigns:
                self._assign(*a)
            return 0
        argv = [it for raw, ln in words for it in self.expand(raw, ln)]
        return self._exec(argv, assigns, words[0][1])

    def _assign(self, name, op, value, line, export=False):
        if isinstance(value, str):
            self.substituted = False
            items = self.expand(value, line, split=False)
            if self.substituted:  # its value is a command's output, which is never run here
                self.unresolved[name] = (line, value)
            value = Item(
                "".join(it.text for it in items),
                line,
                tuple(sorted({d for it in items for d in it.deps})),
            )
        old = self.vars.get(name)
        if op == "+=":
            if isinstance(value, list) or isinstance(old, list):
                value = (old if isinstance(old, list) else [old] if old else []) + (
                    value if isinstance(value, list) else [value]
                )
            else:
                self.grow(len(value.text), line)
                value = Item((old.text if old else "") + value.text, line, value.deps)
        if isinstance(value, list) and len(value) > MAX_ITEMS:
            raise TooLarge(f"an array of more than {MAX_ITEMS:,} elements", line)
        if isinstance(value, Item) and len(value.text) > MAX_VALUE_CHARS:
            raise TooLarge(f"a value of more than {MAX_VALUE_CHARS:,} characters", line)
        self.vars[name] = value
        if export:
            self.exported.add(name)

    def _exec(self, argv: list[Item], assigns, line) -> int:
        name = os.path.basename(argv[0].text) if argv else ""
        rest = argv[1:]
        if name in ("export", "declare", "local", "readonly", "typeset"):
            for it in rest:
                m = ASSIGN.match(it.text)
                if m:
                    self.vars[m.group(1)] = Item(m.group(3), it.line, it.deps)
                    if name == "export":
                        self.exported.add(m.group(1))
                elif name == "export" and not it.text.startswith("-"):
                    self.exported.add(it.text)
            return 0
        if name == "unset":
            for it in rest:
                self.vars.pop(it.text, None)
            return 0
        if name in ("[", "[[", "test"):
            return self._test([it.text for it in rest if it.text not in ("]", "]]")], line)
        if name in ("true", ":"):
            return 0
        if name == "false":
            return 1
        if name == "exit":
            self.exited = True
            self.exit_line = self.exit_line or line
            self.notes.append((line, "the script exits here"))
            return 0
        if name in ("source", "."):
            self.notes.append((line, f"`{name} {rest[0].text if rest else ''}` not followed"))
            return 0
        found = python_launch(argv, line)
        if found is None:
            if name not in _QUIET:
                self.notes.append((line, f"command `{name}` skipped"))
            return 0
        if isinstance(found, tuple):  # a python command that launches no program
            self.notes.append(found)
            return 0
        env = {k: self.scalar(k) for k in sorted(self.exported) if self.scalar(k) is not None}
        for n, _op, v, ln in assigns:
            env[n] = Item("".join(it.text for it in self.expand(v, ln, split=False)), ln)
        found.env = env
        self.launches.append(found)
        return 0

    def _test(self, a: list[str], line: int) -> int:
        if "-o" in a or "||" in a:
            k = a.index("-o") if "-o" in a else a.index("||")
            return 0 if self._test(a[:k], line) == 0 or self._test(a[k + 1 :], line) == 0 else 1
        if "-a" in a or "&&" in a:
            k = a.index("-a") if "-a" in a else a.index("&&")
            return 0 if self._test(a[:k], line) == 0 and self._test(a[k + 1 :], line) == 0 else 1
        if a and a[0] == "!":
            return 1 - self._test(a[1:], line)
        if len(a) == 1:
            return 0 if a[0] else 1
        if len(a) == 2 and a[0] in ("-n", "-z"):
            return 0 if bool(a[1]) == (a[0] == "-n") else 1
        if len(a) == 2 and a[0] in ("-f", "-d", "-e", "-x", "-r"):
            self.notes.append((line, f"file test `{' '.join(a)}` assumed false"))
            return 1
        if len(a) == 3:
            x, op, y = a
            ints = {
                "-eq": operator.eq,
                "-ne": operator.ne,
                "-lt": operator.lt,
                "-le": operator.le,
                "-gt": operator.gt,
                "-ge": operator.ge,
            }
            if op in ints:
                try:
                    return 0 if ints[op](int(x), int(y)) else 1
                except ValueError:
                    return 1
            if op in ("=", "=="):
                return 0 if x == y else 1
            if op == "!=":
                return 0 if x != y else 1
        self.notes.append((line, f"test `{' '.join(a)}` not understood (false)"))
        return 1

    def _if(self, live: bool) -> int:
        taken = False
        while True:
            self.pos += 1  # if / elif
            cond = live and not taken and self._cond(("then",)) == 0
            if not (live and not taken):
                self.block(stop=("then",), live=False)
            self.pos += 1  # then
            self.block(stop=("elif", "else", "fi"), live=cond)
            taken = taken or cond
            word = self.peek()[1]
            if word == "elif":
                continue
            if word == "else":
                self.pos += 1
                self.block(stop=("fi",), live=live and not taken)
            self.pos += 1  # fi
            return 0

    def _cond(self, stop) -> int:
        status = 0
        while self.peek()[1] not in stop and self.peek()[0] != "EOF":
            if self.peek()[0] == "NL" or self.peek()[:2] == ("OP", ";"):
                self.pos += 1
                continue
            start = self.pos
            status = self.and_or(True)
            if self.pos == start:  # a stray token (`if ) then`): step over it, never loop
                self.pos += 1
        return status

    def _next(self, what: str, line: int):
        """The next token; the script ending here is an error, never an endless loop."""
        if self.pos >= len(self.toks):
            raise BashError(f"the script ends inside {what}", line)
        self.pos += 1
        return self.toks[self.pos - 1]

    def _case(self, live: bool) -> int:
        line = self.peek()[2]
        self.pos += 1
        _, raw, line = self._next("`case`", line)
        self.pos -= 1
        subject = "".join(it.text for it in self.expand(raw, line, split=False)) if live else ""
        self.pos += 2  # word, `in`
        matched = False
        while True:
            while self.peek()[0] == "NL":
                self.pos += 1
            if self.peek()[1] == "esac":
                self.pos += 1
                return 0
            pats = []
            while self.peek()[:2] != ("OP", ")"):
                k, t, ln = self._next("`case` (no `esac`)", line)
                if k == "WORD" and t != "(":
                    pats.append("".join(it.text for it in self.expand(t, ln, split=False)))
            self.pos += 1
            hit = live and not matched and any(glob_match(p, subject) for p in pats)
            self.block(stop=(";;", "esac"), live=hit)
            matched = matched or hit
            if self.peek()[1] == ";;":
                self.pos += 1

    def _skip_to(self, words):
        depth = 0
        while self.peek()[0] != "EOF":
            t = self.peek()[1]
            self.pos += 1
            depth += t in ("do", "{")
            if t in words:
                depth -= 1
                if depth <= 0:
                    return


def resolve(
    text: str, env: dict[str, str] | None = None, args: list[str] | None = None
) -> Resolved:
    """Resolve a bash script's launch. `env`: the variables the caller's environment would set
    (nothing is read from this process); `args`: the script's own arguments (`$@`)."""
    if len(text) > MAX_SCRIPT_CHARS:
        raise ToplError(
            f"the script is {len(text):,} characters; the importer reads at most "
            f"{MAX_SCRIPT_CHARS:,} (launch scripts are a few KB)",
            fix="import the launch script itself, not a generated or concatenated file",
        )
    sh = _Shell(dict(env or {}), list(args or []))
    try:
        sh.run(tokens(text))
    except BashError as e:
        raise ToplError(
            f"the script cannot be read as bash: {e}",
            where=f"line {e.line}",
            fix="check that quotes, `$(...)`, `if`/`fi`, `case`/`esac` and arrays are closed "
            "(`bash -n SCRIPT` finds the same)",
        ) from None
    except TooLarge as e:
        raise ToplError(
            f"the script builds {e.what}; a launch script builds a few KB, so this is not read",
            where=f"line {e.line}",
            fix="import the launch script itself: a script that doubles or repeats a variable in "
            "a loop of assignments is not one (write the value it means)",
        ) from None
    except RecursionError:
        raise ToplError(
            "the script nests quotes, `$(...)` or `${...}` too deeply to read",
            fix="import a launch script with ordinary nesting",
        ) from None
    notes = sorted(set(sh.notes))
    first = sh.launches[0] if sh.launches else None
    return Resolved(first, notes, list(sh.launches), sh.exit_line, dict(sh.unresolved))
