"""Per-sweep reuse for the rules that read the rendered command (TOP-VERL-*, TOP-INIT-*, ...).

Their declared keys do not cover what they read (the command is rendered from the whole spec),
so `sweep_memo` used to run them for every point. Within one base, a point whose command was
patched (plan/patch.py) differs from the base only in its swept keys and in the command entries
those keys alone decide. Each run of such a rule here is traced: the spec keys it read through
the recording view, the command entries it read (a recording command: listing every entry
reads them all, listing the keys by writer or the entries of some value types reads only what it
returns), and what every read outside the view declared where it unwrapped the spec
(`view.unwrap(spec, *keys)`; the whole spec makes the rule run for every point). A later point reuses a traced answer only when every swept key that trace read has the
same value: the rule would read the same inputs and answer the same (rules are pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from topl.launcher.render import command as C
from topl.launcher.spec import view

if TYPE_CHECKING:
    from topl.launcher.contract.core import Rule
    from topl.launcher.plan.patch import Template
    from topl.launcher.spec.job import JobSpec

ALL = "*"


class _Log(set[str]):
    """What one run read: spec keys (the view's and the sites') and command keys (`cmd:KEY`);
    ALL when it read something no key names (the whole command, the environment entries, an
    unlisted site)."""


class _RecDict(dict[str, Any]):
    """A command map that logs each key looked up, and ALL when it is listed."""

    log: _Log

    def get(self, k: str, default: Any = None) -> Any:
        self.log.add(f"cmd:{k}")
        return super().get(k, default)

    def __getitem__(self, k: str) -> Any:
        self.log.add(f"cmd:{k}")
        return super().__getitem__(k)

    def __contains__(self, k: object) -> bool:
        self.log.add(f"cmd:{k}")
        return super().__contains__(k)

    def _all(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.log.add(ALL)
        return fn

    def keys(self) -> Any:
        return self._all(super().keys)()

    def values(self) -> Any:
        return self._all(super().values)()

    def items(self) -> Any:
        return self._all(super().items)()

    def __iter__(self) -> Any:
        return self._all(super().__iter__)()

    def __len__(self) -> int:
        return int(self._all(super().__len__)())

    # dict's C paths that read the values without keys() / __getitem__
    def copy(self) -> dict[str, Any]:
        return dict(self._all(super().copy)())

    def __eq__(self, other: object) -> Any:  # NotImplemented passes through
        return self._all(super().__eq__)(other)

    def __ne__(self, other: object) -> Any:
        return self._all(super().__ne__)(other)

    def __or__(self, other: Any) -> Any:
        return self._all(super().__or__)(other)

    def __ror__(self, other: Any) -> Any:
        return self._all(super().__ror__)(other)

    __hash__ = None


def _recording(cmd: C.Command, log: _Log) -> C.Command:
    entries, own = _RecDict(cmd.entries), _RecDict(cmd.own)
    entries.log = own.log = log
    rec = C.Command.__new__(_RecCommand)
    rec.entries, rec.own, rec._spec, rec._env, rec.user = entries, own, cmd._spec, None, cmd.user
    rec.log = log  # type: ignore[attr-defined]
    return rec


class _RecCommand(C.Command):
    @property
    def env(self) -> dict[str, C.Entry]:  # rendered from the whole spec
        self.log.add(ALL)  # type: ignore[attr-defined]
        return super().env

    # A patched point's command has the traced one's keys, in its order, each set by the same
    # writer; only the values of its swept keys' entries differ, each of the traced value's
    # type (command_patch.patched). So listing keys by writer reads nothing that varies, and a
    # selection by value type reads only the entries it returns.
    def keys_by(self, by: tuple[str, ...]) -> list[str]:
        return [e.key for e in dict.values(self.entries) if e.by in by]

    def typed(self, by: tuple[str, ...], types: tuple[type, ...]) -> list[C.Entry]:
        got = [e for e in dict.values(self.entries) if e.by in by and isinstance(e.value, types)]
        self.log.update(f"cmd:{e.key}" for e in got)  # type: ignore[attr-defined]
        return got


def traced_run(rule: Rule, spec: JobSpec, cmd: C.Command) -> tuple[Any, _Log]:
    """(rule.run's answer, what it read) on `spec`, whose command is `cmd`: the keys read through
    the view, the command entries read, and what each `unwrap` declared (view.RENDERED: only the
    command, traced entry by entry; view.WHOLE: everything)."""
    log = _Log()
    reads = view.Reads()
    C.remember(spec, _recording(cmd, log))
    try:
        got = rule.run(view.View(spec, reads))  # type: ignore[arg-type]
    finally:
        C.remember(spec, cmd)
    log.update(reads)
    log.update(ALL if k == view.WHOLE else k for k in reads.declared if k != view.RENDERED)
    return got, log


class Traced:
    """One command-reading rule over one base: its answers by the swept values its runs read."""

    def __init__(self, rule: Rule, varying: tuple[str, ...], cap: int):
        self.rule, self.varying, self.cap = rule, varying, cap  # cap: answers kept per trace
        self.traces: dict[tuple[str, ...], dict[tuple[Any, ...], Any]] = {}
        self.every = False  # a run read everything that varies: run it for every point
        self.full = False  # a run past `cap` was not traced

    def answer(
        self, spec: JobSpec, cmd: C.Command | None, template: Template | None, point: dict[Any, Any]
    ) -> Any:
        """rule.run(spec). `cmd`: the point's patched command, None where it was built whole
        (then `template` is None too); `point`: the swept values ("hv") and, shared by the rules
        of one point, each trace's key tuple."""
        if cmd is None or template is None or self.every:
            return self.rule.run(spec)
        hv = point[None]
        for keys, table in self.traces.items():
            at = point.get(keys)
            if at is None:
                at = point[keys] = tuple(hv[k] for k in keys)
            got = table.get(at, _MISS)
            if got is not _MISS:
                return got
        if sum(map(len, self.traces.values())) >= self.cap:
            self.full = True  # its answers now follow keys no trace names (sweep_memo.joint)
            return self.rule.run(spec)  # full: what is kept still answers, the rest just runs
        got, log = traced_run(self.rule, spec, cmd)
        keys = self._read(log, template)
        if keys == self.varying:
            self.every = True  # nothing to reuse: keep no traces
            self.traces.clear()
            return got
        self.traces.setdefault(keys, {})[tuple(hv[k] for k in keys)] = got
        return got

    def _read(self, log: _Log, template: Template) -> tuple[str, ...]:
        """The swept keys a run read: through the view or a site, or through a command entry
        that the key alone decides (every other entry is the base's, in every patched point)."""
        if ALL in log:
            return self.varying
        spec_keys = [k for k in log if not k.startswith("cmd:")]
        verl_keys = {k[4:] for k in log if k.startswith("cmd:")}
        out = []
        for v in self.varying:
            if any(r == v or r.startswith(v + ".") or v.startswith(r + ".") for r in spec_keys):
                out.append(v)
            elif template.row(v) in verl_keys or template.row(v) is None:
                out.append(v)  # no row: a point changing it is built whole (never traced)
        return tuple(out)


_MISS = object()
