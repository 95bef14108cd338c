"""README.md stays short: what the project is, the two commands, two quickstarts and links
into the docs. Its links lead to files of the checkout, and each section it lends the site
(``<!-- NAME: start -->`` ... ``<!-- NAME: end -->``) is shown by exactly one page."""

from __future__ import annotations

import re

from tests.helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = {page.name: page.read_text(encoding="utf-8") for page in (REPO / "docs").glob("*.md")}


def test_readme_is_under_200_lines():
    assert len(README.splitlines()) < 200


def test_readme_links_lead_to_files_of_the_checkout():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert targets
    missing = [target for target in targets if not (REPO / target).exists()]
    assert not missing


def test_each_section_readme_lends_is_shown_by_one_page():
    sections = re.findall(r"^<!-- (\w+): start -->$", README, re.M)
    assert sections == ["what", "commands", "pytorch", "jax", "stop"]
    for name in sections:
        assert re.search(rf"^<!-- {name}: end -->$", README, re.M), name
        showing = [
            page for page, text in PAGES.items() if f":start-after: <!-- {name}: start -->" in text
        ]
        assert len(showing) == 1, (name, showing)
