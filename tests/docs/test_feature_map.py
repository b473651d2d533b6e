"""README's map of features to files stays true, and the documentation's links resolve.

"Where each feature lives" in README.md names the file behind each feature, relative
to the package in each table's heading (or to the repository). A file that is moved
or renamed without updating the map fails here, as does a relative link or an
anchor (``#section``) of README.md, docs/ or benchmarks/README.md that leads nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP_HEADING = "## Where each feature lives"
PACKAGE_HEADING = re.compile(r"^### .*\(`(packages/[\w-]+)/`\)", re.MULTILINE)
CODE = re.compile(r"`([^`\s]+)`")
LOOKS_LIKE_PATH = re.compile(r"^[\w.-]+(/[\w.{},*-]+)+$|^[\w-]+\.(py|cpp|h|c|md|toml)$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
LINKED_DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "packages" / "torch-openreg" / "csrc" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def expand_braces(path: str) -> list[str]:
    """``a.{h,cpp}`` -> ``a.h``, ``a.cpp``."""
    match = re.search(r"\{([^}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for choice in match.group(1).split(",") for p in expand_braces(head + choice + tail)]


def feature_map_paths() -> list[tuple[str, str]]:
    """(package folder or "", path) for every file path named in README's feature map."""
    text = (ROOT / "README.md").read_text()
    assert MAP_HEADING in text, "README.md lost its feature map section"
    section = text.split(MAP_HEADING, 1)[1].split("\n## ", 1)[0]
    found = []
    for part in re.split(r"(?=^### )", section, flags=re.MULTILINE):
        heading = PACKAGE_HEADING.match(part)
        package = heading.group(1) if heading else ""
        for token in CODE.findall(part):
            if LOOKS_LIKE_PATH.match(token) and not token.startswith(("torch/", "ATen/")):
                found += [(package, path) for path in expand_braces(token)]
    return found


@pytest.mark.parametrize("package, path", feature_map_paths())
def test_feature_map_names_existing_files(package, path):
    bases = [ROOT / package, ROOT] if package else [ROOT]
    found = any(any(base.glob(path)) if "*" in path else (base / path).exists() for base in bases)
    assert found, f"README's feature map names {path}: not found"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(document: Path) -> set[str]:
    text = FENCED.sub("", document.read_text())
    return {github_anchor(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, re.MULTILINE)}


def relative_links() -> list[tuple[Path, str]]:
    links = []
    for document in LINKED_DOCUMENTS:
        for target in LINK.findall(FENCED.sub("", document.read_text())):
            if not target.startswith(("http://", "https://", "mailto:")):
                links.append((document, target))
    return links


@pytest.mark.parametrize(
    "document, target", relative_links(), ids=lambda v: v.name if isinstance(v, Path) else v
)
def test_relative_links_resolve(document, target):
    path, _, anchor = target.partition("#")
    destination = (document.parent / path).resolve() if path else document
    assert destination.exists(), f"{document.relative_to(ROOT)} links to missing {target}"
    if anchor:
        assert anchor in anchors(destination), f"{document.relative_to(ROOT)}: no #{anchor}"
