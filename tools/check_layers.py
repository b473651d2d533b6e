"""Checks that includes in the binding's C++ sources only point downward.

``packages/torch-openreg/csrc/`` is layered (see its README.md): a file may
include headers of its own folder and of the folders listed before it in
``LAYERS``, never of a folder after it, and never of a folder on the same
level as its own (``kernels`` and ``custom_ops`` are independent of each
other). Every project include must name its folder (``"engine/plan.h"``), so
the layer of every include is visible in the source. Run by ``nox -s lint``;
exits non-zero listing each violation.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parents[1] / "packages" / "torch-openreg" / "csrc"

# Lowest first; folders in one tuple share a level and may not include each other.
LAYERS: list[tuple[str, ...]] = [
    ("base",),
    ("memory",),
    ("integration",),
    ("engine",),
    ("distributed", "kernels", "custom_ops"),
    ("python",),
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def level_of(folder: str) -> int | None:
    for level, folders in enumerate(LAYERS):
        if folder in folders:
            return level
    return None


def violations(csrc: Path) -> list[str]:
    found: list[str] = []
    for source in sorted(csrc.rglob("*")):
        if source.suffix not in (".h", ".cpp"):
            continue
        relative = source.relative_to(csrc)
        own_folder = relative.parts[0] if len(relative.parts) > 1 else ""
        own_level = level_of(own_folder)
        if own_level is None:
            folders = [name for level in LAYERS for name in level]
            found.append(f"{relative}: not inside a layer folder {folders}")
            continue
        for match in INCLUDE.finditer(source.read_text()):
            target = match.group(1)
            target_folder = target.split("/", 1)[0] if "/" in target else ""
            target_level = level_of(target_folder)
            if target_level is None:
                found.append(f'{relative}: include "{target}" does not name a layer folder')
            elif target_level > own_level:
                found.append(f'{relative}: includes "{target}" from a higher layer')
            elif target_level == own_level and target_folder != own_folder:
                found.append(f'{relative}: includes "{target}" from a sibling layer')
    return found


def main() -> int:
    problems = violations(CSRC)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) break the layering of {CSRC} (see its README.md)")
        return 1
    print(f"includes in {CSRC} point downward only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
