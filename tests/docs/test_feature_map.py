"""The maps of features to files stay true, and the documentation's links resolve.

Two maps name the files behind the features: README.md's compact "Feature map" (one
line per area, paths relative to the repository) and docs/feature-map.md (a table per
area, paths relative to the package in each table's heading, or to the repository).
A file that is moved or renamed without updating a map fails here, as does a relative
link or an anchor (``#section``) of README.md, docs/ or benchmarks/README.md that
leads nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAP_HEADING = "## Feature map"
FEATURE_MAP = ROOT / "docs" / "feature-map.md"
PACKAGE_HEADING = re.compile(r"^##+ .*\(`(packages/[\w-]+)/`\)", re.MULTILINE)
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


def map_paths(text: str) -> list[tuple[str, str]]:
    """(package folder or "", path) for every file path named in a map: ``text`` split at
    its headings, paths under a heading naming a package relative to that package."""
    found = []
    for part in re.split(r"(?=^##+ )", text, flags=re.MULTILINE):
        heading = PACKAGE_HEADING.match(part)
        package = heading.group(1) if heading else ""
        for token in CODE.findall(part):
            if LOOKS_LIKE_PATH.match(token) and not token.startswith(("torch/", "ATen/")):
                found += [(package, path) for path in expand_braces(token)]
    return found


def readme_map() -> str:
    text = (ROOT / "README.md").read_text()
    assert README_MAP_HEADING in text, "README.md lost its feature map section"
    return text.split(README_MAP_HEADING, 1)[1].split("\n## ", 1)[0]


def path_exists(package: str, path: str) -> bool:
    bases = [ROOT / package, ROOT] if package else [ROOT]
    return any(any(base.glob(path)) if "*" in path else (base / path).exists() for base in bases)


MAPS = {
    "README.md": map_paths(readme_map()),
    "docs/feature-map.md": map_paths(FEATURE_MAP.read_text()),
}


def test_both_maps_name_files() -> None:
    # Guards the extraction: a broken pattern or a lost section would test nothing.
    assert len(MAPS["README.md"]) >= 15, MAPS["README.md"]
    assert len(MAPS["docs/feature-map.md"]) >= 100, len(MAPS["docs/feature-map.md"])


def test_a_missing_file_is_caught() -> None:
    text = "## Debug (`packages/torch-openreg/`)\n| x | `csrc/engine/no_such_file.cpp` |\n"
    assert map_paths(text) == [("packages/torch-openreg", "csrc/engine/no_such_file.cpp")]
    assert not path_exists("packages/torch-openreg", "csrc/engine/no_such_file.cpp")
    assert path_exists("packages/torch-openreg", "csrc/engine/fallback.cpp")


@pytest.mark.parametrize(
    "document, package, path",
    [(document, package, path) for document, paths in MAPS.items() for package, path in paths],
)
def test_feature_maps_name_existing_files(document: str, package: str, path: str) -> None:
    assert path_exists(package, path), f"the feature map of {document} names {path}: not found"


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
