"""Is an import exact? What the recipe does not carry of the script's launch (issue 30: an import
never says "round trip: exact" when it dropped or changed something), and the verdict's words."""

from __future__ import annotations

import re

from topl.launcher.render.env import without_guard

# bash_expand's notes for text it keeps literally where bash would compute a value
_LITERAL = re.compile(
    r"^(?:command substitution (.+) not run \(kept literally\)|arithmetic (.+) not resolved"
    r"|(\$\{.+\}) not resolved)$"
)


def dropped_rows(s, env_r: dict[str, str]) -> list[dict]:
    """Launch arguments the reader could not keep (`Script.dropped`), and the env vars that choose
    code (`Script.code_env`: never written) the rendered recipe does not set to the script's value
    (the seed's patch module is rendered by its stack: the same)."""
    rows = [
        {"line": ln, "kind": "dropped", "key": _key(text), "script": text, "why": why}
        for ln, text, why in s.dropped
    ]
    rendered = without_guard(env_r)
    rows += [
        {
            "line": it.line,
            "kind": "dropped",
            "key": f"env {k}",
            "script": it.text,
            "why": "chooses what code runs: a recipe may not set it (set it on your own command line)",
        }
        for k, it in getattr(s, "code_env", {}).items()
        if rendered.get(k) != it.text
    ]
    rows += _literal_rows(s)
    return sorted(rows, key=lambda r: r["line"] or 0)


def _literal_rows(s) -> list[dict]:
    """Settings holding text bash computes when it runs (`$(hostname)`): the recipe has the text."""
    frags = {next(g for g in m.groups() if g) for _, n in s.notes if (m := _LITERAL.match(n))}
    values = [(k, st.line, str(st.value)) for k, st in s.overrides.items()]
    values += [(f"env {k}", it.line, it.text) for k, it in s.env.items()]
    return [
        {
            "line": ln,
            "kind": "kept as text",
            "key": k,
            "script": v,
            "why": f"bash computes {f} when it runs; the importer never runs it and keeps the "
            "text (write the value in the script or the recipe)",
        }
        for k, ln, v in values
        if (f := next((f for f in sorted(frags) if f in v), None))
    ]


def _key(text: str) -> str:
    """The key an argument sets (`a.b=v` -> `a.b`), else the argument itself."""
    key, eq, _ = text.partition("=")
    key = key.lstrip("+~")
    return key if eq and key and " " not in key else text


def trip_text(round_trip: list[dict], dropped: list[dict]) -> str:
    """`exact`, or `NOT exact` with the lines and keys: what renders differently, what the recipe
    does not carry, what it carries as text bash would have computed."""
    if not round_trip and not dropped:
        return "exact"
    parts = []
    if round_trip:
        parts.append(f"{len(round_trip)} setting(s) differ ({_where(round_trip)})")
    for kind in ("dropped", "kept as text"):
        rows = [r for r in dropped if r["kind"] == kind]
        if rows:
            parts.append(f"{len(rows)} {kind} ({_where(rows)})")
    return "NOT exact: " + "; ".join(parts)


def _where(rows: list[dict], most: int = 4) -> str:
    named = [
        (f"line {r['line']} " if r.get("line") is not None else "") + str(r["key"])
        for r in rows[:most]
    ]
    more = f", +{len(rows) - most} more" if len(rows) > most else ""
    return ", ".join(named) + more
