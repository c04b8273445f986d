"""Where the tests find the checkout: tests live one folder per stage below tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
