"""The README's links into the repository point at files that exist (the docs site checks its own links
when `make docs` builds it with --strict; the README is read on the repository's page, outside the site)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_links_to_files_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme) if "://" not in t]
    assert targets, "the README links to no page of the docs"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_docs_page_is_in_the_site_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    unlisted = [page for page in pages if f": {page}" not in config]
    assert not unlisted, f"docs pages missing from mkdocs.yml's nav: {unlisted}"
