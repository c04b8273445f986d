"""Output shared by the commands: violations for people, JSON for machines."""
from __future__ import annotations

import json
import sys


def print_violations(violations, stream=None) -> None:
    for v in violations:
        print(v.render(), file=stream or sys.stderr)


def print_json(data) -> None:
    print(json.dumps(data, indent=1, default=str))
