"""Checks that no two test modules in the repository share a file name.

pytest imports test modules by their base name (rootdir-relative "rootdir"
import mode), so two ``test_streams.py`` files in different packages make
``pytest`` from the repository root fail at collection. Run by ``nox -s lint``;
exits non-zero naming each clash.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_PARTS = {".venv", ".nox", "build", "node_modules", ".git"}


def test_modules() -> dict[str, list[Path]]:
    """Every test_*.py outside virtual environments and build trees, by base name."""
    found: dict[str, list[Path]] = defaultdict(list)
    for path in ROOT.rglob("test_*.py"):
        if SKIPPED_PARTS.isdisjoint(path.relative_to(ROOT).parts):
            found[path.name].append(path.relative_to(ROOT))
    return found


def main() -> int:
    clashes = {name: paths for name, paths in test_modules().items() if len(paths) > 1}
    for name, paths in sorted(clashes.items()):
        listed = ", ".join(str(path) for path in paths)
        print(f"{name}: {listed} — rename one (prefix it with its package, e.g. test_runtime_*)")
    return 1 if clashes else 0


if __name__ == "__main__":
    sys.exit(main())
