"""One redaction pass for everything topl writes or prints: secrets by name, by value, by shape.

`current()` is the process's redactor. It knows the values of every secret-named variable of the
launching environment and of the job's `cluster.env` (`remember`), so a secret is removed wherever
it appears: in run-dir files, on stdout/stderr (`install` wraps both streams), in `topl render`.
Common credential shapes (URL passwords, cloud / forge / hub tokens, private keys, `NAME=value`
for a secret-looking NAME) are removed even when topl never saw the value.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable, Iterable, TextIO

REDACTED = "<redacted>"
MIN_VALUE_LEN = 6  # shorter values (true, 1, abc) would garble output when replaced everywhere
# Words that make a variable name secret (split on `_`), and endings inside one word (APIKEY).
_WORDS = {
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PWD",
    "PASS",
    "PAT",
    "CREDENTIAL",
    "CREDENTIALS",
    "DSN",
    "COOKIE",
    "PRIVATE",
}
_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PWD")
_STARTS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_NOT_SECRET = {"PWD", "OLDPWD"}  # the shell's working directories

_SHAPES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # scheme://user:PASSWORD@host (DATABASE_URL, REDIS_URL, git remotes)
    (
        # (an empty user, and a password with `/` or `@` in it, are still userinfo: it ends at
        # the last `@` before the host)
        re.compile(
            r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s\"']*:)[^\s\"']+?"
            r"(?=@[^@\s\"'/]+(?:[/\s\"'?#]|$))"
        ),
        r"\g<keep>" + REDACTED,
    ),
    # user:PASSWORD@host without a scheme (a Ray address `user:pass@head:6379`); the user part
    # is a name (no `/`, `:` or `@`), the host a name with an optional port
    (
        re.compile(
            r"(?<![\w.%+/:@-])(?P<keep>[A-Za-z][A-Za-z0-9._%+-]*:)(?!//)[^\s\"'@/]+"
            r"(?=@[A-Za-z0-9.-]+(?::\d+)?(?:[/\s\"'?#,;)]|$))"
        ),
        r"\g<keep>" + REDACTED,
    ),
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----.*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # an entry of an environment map under a lower-case name (`cluster.env.hf_token=...`,
    # `env_vars.my_key: ...`): _ASSIGN reads only upper-case names, everywhere else
    (
        re.compile(
            r"(?P<keep>(?:\benv|env_vars)\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*['\"]?)"
            r"(?P<value>[^\s\"',}\]]+)"
        ),
        lambda m: m[0] if not secret_name(m["name"]) else m["keep"] + REDACTED,
    ),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),  # AWS access key id
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), REDACTED),  # GitHub tokens
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), REDACTED),  # GitLab
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), REDACTED),  # Hugging Face
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), REDACTED),  # OpenAI-style API keys
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), REDACTED),  # Slack
    (
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        REDACTED,
    ),  # JWT
    (re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*"), r"\g<keep>" + REDACTED),
]
# NAME=value / "NAME": "value" / NAME: value for an upper-case (environment-style) NAME, not
# preceded by [A-Za-z0-9_]. (That test sits after the name's first letter, as a lookbehind over
# it and the character before: a pattern that starts with a letter class is searched for by the
# regex engine's fast scan, one that starts with a lookbehind at every position of the text.)
_ASSIGN = re.compile(
    r"(?P<name>[A-Z](?<![A-Za-z0-9_].)[A-Z0-9_]*)(?P<sep>\"?\s*[=:]\s*)"
    r"(?P<value>\$\{[^}\"]*\}|\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s\"',}\]]+)"
)


# `${NAME}`, `${NAME:?message}` (how command.sh writes a secret), `${oc.env:NAME}` (how a user
# hands one to topl): references to a variable, not values; `${oc.env:NAME,default}` is not one
_REFERENCE = re.compile(r"^\$\{(?:oc\.env:)?[A-Za-z_]\w*(?::?[-?+=][^}\"]*)?\}$")


def secret_name(name: str) -> bool:
    """Does a variable name look like it holds a secret (MY_API_KEY, MYSQL_PWD, GITHUB_PAT)?"""
    upper = name.upper()
    if upper in _NOT_SECRET:
        return False
    for word in re.split(r"[^A-Z0-9]+", upper):
        if word in _WORDS or word.endswith(_ENDINGS) or word.startswith(_STARTS):
            return True
    return False


def secret_entry(name: str, value: Any) -> bool:
    """An environment entry that must stay out of argv and files: a secret-looking name, or a
    value with a credential shape (a URL with a password, a hub token), whatever its name."""
    v = str(value)
    return secret_name(name) or _shapes(v) != v


# What each of _SHAPES cannot match without (lower case; the text is lowered to test): a pattern
# is only run where one of its needles is there (`plan --json` writes megabytes with none).
_NEEDLES = [
    ("://",),
    ("@",),
    ("-----begin ",),
    ("env.", "env_vars."),
    ("akia", "asia"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("glpat-",),
    ("hf_",),
    ("sk-",),
    ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-"),
    ("eyj",),
    ("bearer",),
]


def _shapes(text: str) -> str:
    low = text.lower()
    for (pattern, repl), needles in zip(_SHAPES, _NEEDLES, strict=True):
        if any(n in low for n in needles):
            text = pattern.sub(repl, text)
            low = text.lower()
    return text


class Redactor:
    """Replaces known secret values and credential shapes by `<redacted>`."""

    def __init__(self, values: Iterable[Any] = ()) -> None:
        self.values: set[str] = set()
        self.quoted: dict[str, re.Pattern[str]] = {}  # values with quote characters, any quoting
        self.add(values)

    def add(self, values: Iterable[Any]) -> None:
        for v in values:
            v = str(v)
            if len(v) >= MIN_VALUE_LEN:
                self.values.add(v)
                self.values.add(json.dumps(v)[1:-1])  # as it appears inside a JSON string
                if _QUOTING.search(v) and len(_QUOTING.sub("", v)) >= MIN_VALUE_LEN:
                    self.quoted[v] = _any_quoting(v)

    def remember(self, env: dict[str, Any]) -> None:
        """Add the values of the secret-named entries of an environment mapping."""
        self.add(
            str(v)
            for k, v in env.items()
            # a reference (`${oc.env:NAME}`) names where the value is, it is not the value
            if secret_name(str(k)) and v is not None and not _REFERENCE.match(str(v))
        )

    def text(self, text: str) -> str:
        for v in sorted(self.values, key=len, reverse=True):
            if v in text:
                text = text.replace(v, REDACTED)
        for pattern in self.quoted.values():
            text = pattern.sub(REDACTED, text)
        return _ASSIGN.sub(_assign, _shapes(text))

    def env(self, env: dict[str, Any]) -> dict[str, Any]:
        """An environment with every secret-named value (and secret value) redacted."""
        return {
            k: REDACTED if secret_name(str(k)) else self.text(str(v))
            for k, v in sorted(env.items())
        }

    def obj(self, o: Any) -> Any:
        """A JSON-like object with secrets redacted (secret-named keys hide their whole value)."""
        if isinstance(o, dict):
            return {
                k: REDACTED
                if isinstance(k, str) and secret_name(k) and isinstance(v, (str, int, float))
                else self.obj(v)
                for k, v in o.items()
            }
        if isinstance(o, (list, tuple)):
            return [self.obj(v) for v in o]
        return self.text(o) if isinstance(o, str) else o


# A value with a quote or backslash is escaped differently by each writer (shlex's '"'"', JSON's
# \", Hydra's \'): match it with any run of quoting characters between its characters.
_QUOTING = re.compile(r"[\\'\"]")
_QUOTE_RUN = r"[\\'\"]*"


def _any_quoting(v: str) -> re.Pattern[str]:
    return re.compile(_QUOTE_RUN.join(re.escape(c) for c in _QUOTING.sub("", v)))


def _assign(m: re.Match[str]) -> str:
    value = m["value"]
    bare = value.strip("\"'")
    if not secret_name(m["name"]) or bare in ("", REDACTED) or _REFERENCE.match(bare):
        return m[0]
    quote = value[0] if value[0] in "\"'" else ""  # keep JSON / shell quoting valid
    return f"{m['name']}{m['sep']}{quote}{REDACTED}{quote}"


_current: Redactor | None = None


def current() -> Redactor:
    """The process's redactor, seeded from the launching environment on first use."""
    global _current
    if _current is None:
        _current = Redactor()
        _current.remember(dict(os.environ))
    return _current


def remember(env: dict[str, Any]) -> None:
    current().remember(env)


def text(text: str) -> str:
    return current().text(text)


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----")
MAX_KEY_LINES = 256  # a 16384-bit RSA key in PEM is ~200 lines; past that, lines show again


class Lines:
    """Redacts a stream one line at a time (a job's console): a private key printed over many
    lines is removed whole, from its BEGIN line to its END line."""

    def __init__(self) -> None:
        self.inside = 0  # lines of an open key block seen so far

    def __call__(self, line: str) -> str:
        if self.inside:
            end = _PEM_END.search(line)
            if end is None:
                self.inside += 1
                if self.inside > MAX_KEY_LINES:  # never ended: not a key after all
                    self.inside = 0
                return ""
            self.inside = 0
            return text(line[end.end() :]) if line[end.end() :].strip() else ""
        begin = _PEM_BEGIN.search(line)
        if begin is not None and _PEM_END.search(line, begin.end()) is None:
            self.inside = 1
            return text(line[: begin.start()]) + REDACTED + "\n"
        return text(line)


class _Stream:
    """A text stream that redacts every write before passing it on."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(current().text(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install() -> None:
    """Redact everything this process prints from now on (stdout and stderr)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Stream):
            setattr(sys, name, _Stream(stream))
