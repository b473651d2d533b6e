"""Checks that no two test modules in the repository share a file name.

pytest imports test modules by their base name (rootdir-relative "rootdir"
import mode), so two ``test_streams.py`` files in different packages make
``pytest`` from the repository root fail at collection. Run by ``nox -s lint``;
exits non-zero naming each clash.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_PARTS = {".venv", ".nox", "build", "node_modules", ".git"}
# A release tree setuptools writes while it makes an sdist (packages/<package>/<name>-<version>/):
# a copy of the package's tests, there only while a build runs beside the lint.
RELEASE_TREE = re.compile(r"^[A-Za-z0-9_.]+-[0-9]")


def skipped(folder: Path) -> bool:
    """Whether the folder (relative to the root) is a virtual environment, a build or
    release tree, or inside one."""
    parts = folder.parts
    if not SKIPPED_PARTS.isdisjoint(parts):
        return True
    return len(parts) >= 3 and parts[0] == "packages" and bool(RELEASE_TREE.match(parts[2]))


def test_modules() -> dict[str, list[Path]]:
    """Every test_*.py outside virtual environments and build or release trees, by base name."""
    found: dict[str, list[Path]] = defaultdict(list)
    # os.walk, pruned before it descends: a release tree can vanish while it is read
    # (an sdist build beside the lint), and os.walk skips a folder it can no longer list.
    for folder, subfolders, files in os.walk(ROOT):
        relative = Path(folder).relative_to(ROOT)
        subfolders[:] = [name for name in subfolders if not skipped(relative / name)]
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                found[name].append(relative / name)
    return found


def main() -> int:
    clashes = {name: paths for name, paths in test_modules().items() if len(paths) > 1}
    for name, paths in sorted(clashes.items()):
        listed = ", ".join(str(path) for path in paths)
        print(f"{name}: {listed} — rename one (prefix it with its package, e.g. test_runtime_*)")
    return 1 if clashes else 0


if __name__ == "__main__":
    sys.exit(main())
