"""Bash lexing for `bash_resolve`: words with their line numbers, quoted strings, `$(...)` /
`${...}` spans, integer arithmetic and case patterns. Pure text functions, nothing runs."""

from __future__ import annotations

import ast
import operator
import re

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$", re.DOTALL)
_OPS = ("&&", "||", ";;", "|", ";", "&")


def tokens(text: str):
    """(kind, text, line) with kind WORD, OP, NL or AOPEN (the `(` of `NAME=(`)."""
    out, i, line, n = [], 0, 1, len(text)
    word, wline = None, 1

    def flush():
        nonlocal word
        if word is not None:
            out.append(("WORD", word, wline))
        word = None

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i, line = i + 2, line + 1
            continue
        if word is None and c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in " \t":
            flush()
            i += 1
            continue
        if c == "\n":
            flush()
            out.append(("NL", "\n", line))
            i, line = i + 1, line + 1
            continue
        if c == "(" and word is not None and word.endswith("=") and ASSIGN.match(word):
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
            if word is not None and word.isdigit():
                word = None
            j = i + 1 + (text[i + 1 : i + 2] == c)
            m = re.match(r"&\d", text[j:])
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
            word, wline = "", line
        j = word_piece_end(text, i)
        piece = text[i:j]
        word += piece
        line += piece.count("\n")
        i = j
    flush()
    return out


def word_piece_end(text: str, i: int) -> int:
    """End of one quoted string, `$(...)`, `${...}`, escape, or plain character at i."""
    c = text[i]
    if c == "'":
        return text.index("'", i + 1) + 1
    if c == '"':
        j = i + 1
        while text[j] != '"':
            j = j + 2 if text[j] == "\\" else word_piece_end(text, j) if text[j] == "$" else j + 1
        return j + 1
    if c == "\\":
        return i + 2
    if c == "`":
        return text.index("`", i + 1) + 1
    if c == "$" and text[i + 1 : i + 2] in ("(", "{"):
        close, depth, j = {"(": ")", "{": "}"}[text[i + 1]], 0, i + 1
        while True:
            if text[j] in "'\"" and close == ")":
                j = word_piece_end(text, j)
                continue
            depth += text[j] == text[i + 1]
            depth -= text[j] == close
            j += 1
            if depth == 0:
                return j
    return i + 1


_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
}


def arith(expr: str, get) -> int:
    """Bash integer arithmetic over + - * / % and parentheses, names read as variables."""

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return int(get(n.id) or 0)
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            return _BIN[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return -ev(n.operand) if isinstance(n.op, ast.USub) else ev(n.operand)
        raise ValueError(expr)

    return ev(ast.parse(expr.replace("$", "").strip(), mode="eval").body)


def glob_match(pattern: str, s: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), s) is not None
