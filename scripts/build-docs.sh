#!/usr/bin/env bash
# Build the docs site into site/ in strict mode (a broken link, a missing page or a failing generated part
# fails the build), then check every internal link and anchor of the built HTML.
#   needs: pip install -e '.[docs]'   (mkdocs + Material, pinned)
set -euo pipefail
cd "$(dirname "$0")/.."
export NO_MKDOCS_2_WARNING=1
python -m mkdocs build --strict --clean "$@"
python scripts/check_site_links.py site
