#!/usr/bin/env python3
"""Check every internal link of the built docs site: each href/src that points into the site must name a file
that exists, and each #anchor an id on that page. External links (http:, https:, mailto:) are not fetched
(CI has no network); they are counted. Exit 1 with the broken links listed.

    python scripts/check_site_links.py site
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value and ((name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script"))):
                self.links.append(value)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def target_file(site: Path, page: Path, path: str) -> Path:
    if path.startswith("/"):  # site-absolute (the 404 page): served from the site's root
        target = (site / unquote(path).lstrip("/")).resolve()
    else:
        target = (page.parent / unquote(path)).resolve() if path else page
    if target.is_dir():
        target = target / "index.html"
    return target


def check(site: Path) -> tuple[int, int, list[str]]:
    site = site.resolve()
    pages = {p: parse(p) for p in site.rglob("*.html")}
    broken: list[str] = []
    internal = external = 0
    for page, parsed in pages.items():
        for link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                external += 1
                continue
            internal += 1
            target = target_file(site, page, parts.path)
            where = f"{page.relative_to(site)}: {link}"
            if not target.is_relative_to(site) or not target.exists():
                broken.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where}: no anchor #{parts.fragment} in {target.relative_to(site)}")
    return internal, external, broken


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "site")
    if not (site / "index.html").is_file():
        print(f"check_site_links: {site} is not a built site (no index.html); build it first", file=sys.stderr)
        return 2
    internal, external, broken = check(site)
    pages = sum(1 for _ in site.rglob("*.html"))
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(
        f"check_site_links: {pages} pages, {internal} internal links checked, {len(broken)} broken, "
        f"{external} external links not fetched"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
