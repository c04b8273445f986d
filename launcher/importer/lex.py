"""Bash lexing for `bash_resolve`: words with their line numbers, quoted strings, `$(...)` /
`${...}` spans, here-documents (their bodies are data, skipped), integer arithmetic and case
patterns. Pure text functions, nothing runs; every function is linear in its input (runs of plain
characters are taken by one regex, words are built from a list of pieces)."""

from __future__ import annotations

import ast
import operator
import re

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.DOTALL)
_OPS = ("&&", "||", ";;", "|", ";", "&")
_DUP = re.compile(r"&\d")  # `2>&1`
_PLAIN = re.compile(r"[^\s\\'\"`$()<>;&|]+")  # characters with no meaning to the lexer
_HEREDOC_WORD = re.compile(r"[ \t]*(['\"]?)([^\s'\"<>;&|()]+)\1")


class BashError(ValueError):
    """Text the reader cannot take apart (an unterminated quote, `$(`, `case`...), with its line."""

    def __init__(self, message: str, line: int):
        self.line = line
        super().__init__(f"line {line}: {message}")


def tokens(text: str):
    """(kind, text, line) with kind WORD, OP, NL or AOPEN (the `(` of `NAME=(`)."""
    out, i, line, n = [], 0, 1, len(text)
    word: list[str] | None = None
    wline = 1
    heredocs: list[tuple[str, bool]] = []  # delimiters whose bodies start at the next newline

    def flush():
        nonlocal word
        if word is not None:
            out.append(("WORD", "".join(word), wline))
        word = None

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i, line = i + 2, line + 1
            continue
        if word is None and c == "#":
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if c in " \t\r":
            flush()
            i += 1
            continue
        if c == "\n":
            flush()
            out.append(("NL", "\n", line))
            i, line = i + 1, line + 1
            for delim, tabs in heredocs:  # here-document bodies: data, never read as bash
                while i < n:
                    k = text.find("\n", i)
                    k = n if k < 0 else k
                    body_line = text[i:k]
                    i, line = k + 1, line + 1
                    if (body_line.lstrip("\t") if tabs else body_line) == delim:
                        break
            heredocs.clear()
            continue
        if c == "(" and word and word[-1].endswith("="):  # pieces are never empty
            if ASSIGN.match("".join(word)):
                flush()
                out.append(("AOPEN", "(", line))
                i += 1
                continue
        if c in "()" and word is None or c == ")":
            flush()
            out.append(("OP", c, line))
            i += 1
            continue
        if c in "<>":
            if word is not None and len(word) == 1 and word[0].isdigit():  # `2>`
                word = None
            double = text[i + 1 : i + 2] == c
            j = i + 1 + double
            if c == "<" and double and text[j : j + 1] == "<":  # here-string `<<<`: one word
                j += 1
            elif c == "<" and double:  # here-document: its body follows the next newline
                tabs = text[j : j + 1] == "-"
                j += tabs
                m = _HEREDOC_WORD.match(text, j)
                if m:
                    heredocs.append((m.group(2), tabs))
            m = _DUP.match(text, j)
            flush()
            out.append(("OP", "REDIR_DONE" if m else "REDIR", line))
            i = j + (2 if m else 0)
            continue
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op:
            flush()
            out.append(("OP", op, line))
            i += len(op)
            continue
        if word is None:
            word, wline = [], line
        m = _PLAIN.match(text, i)
        j = m.end() if m else word_piece_end(text, i, line)
        piece = text[i:j]
        word.append(piece)
        line += piece.count("\n")
        i = j
    flush()
    return out


def _find(text: str, what: str, start: int, line: int, name: str) -> int:
    k = text.find(what, start)
    if k < 0:
        raise BashError(f"unterminated {name}", line)
    return k


def word_piece_end(text: str, i: int, line: int = 0) -> int:
    """End of one quoted string, `$(...)`, `${...}`, escape, or plain character at i."""
    n, c = len(text), text[i]
    if c == "'":
        return _find(text, "'", i + 1, line, "single quote") + 1
    if c == '"':
        j = i + 1
        while True:
            if j >= n:
                raise BashError("unterminated double quote", line)
            d = text[j]
            if d == '"':
                return j + 1
            if d == "\\":
                j += 2
            elif d == "$" or d == "`":
                j = word_piece_end(text, j, line)
            else:
                k = _QUOTED_PLAIN.match(text, j)
                j = k.end() if k else j + 1
    if c == "\\":
        return min(i + 2, n)
    if c == "`":
        return _find(text, "`", i + 1, line, "backquote") + 1
    if c == "$" and text[i + 1 : i + 2] in ("(", "{"):
        opener = text[i + 1]
        close, depth, j = {"(": ")", "{": "}"}[opener], 0, i + 1
        while True:
            if j >= n:
                raise BashError(f"unterminated `${opener}`", line)
            d = text[j]
            if d in "'\"" and close == ")":
                j = word_piece_end(text, j, line)
                continue
            depth += d == opener
            depth -= d == close
            j += 1
            if depth == 0:
                return j
    return i + 1


_QUOTED_PLAIN = re.compile(r'[^"\\$`]+')

_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}
_ARITH_MAX = 200  # characters: launch scripts compute sizes, not programs


def arith(expr: str, get) -> int:
    """Bash integer arithmetic over + - * / % and parentheses, names read as variables."""
    if len(expr) > _ARITH_MAX:
        raise ValueError(expr[:40])

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return int(get(n.id) or 0)
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Mult) and abs(a) > 2**62 // max(abs(b), 1):
                raise ValueError(expr)  # bash wraps at 64 bits; never build huge integers
            return _BIN[type(n.op)](a, b)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        raise ValueError(expr)

    return ev(ast.parse(expr.replace("$", "").strip(), mode="eval").body)


def glob_match(pattern: str, s: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), s) is not None
