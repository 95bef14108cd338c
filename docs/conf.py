"""Sphinx's settings for the documentation site: `make docs` builds docs/ into site/.

Why Sphinx (with MyST-Parser for Markdown and the PyData theme): it is the generator of the
libraries our users read (PyTorch, JAX, Flax, Lightning, torchao), kept up and released
often, and so are MyST-Parser and the theme; the pages stay Markdown, as README.md and
docs/contract.md were, so they read the same on GitHub, and their Python blocks are plain
fenced blocks that tests/project/test_doc_blocks.py runs; autodoc writes the API reference
from the docstrings, which are reStructuredText, its own markup. Material for MkDocs, the
other choice, announces its end of life (5 May 2027) in its own build output.

`make docs` runs `sphinx-build -W --keep-going`: a warning, a broken link or anchor, a
missing include or a name autodoc cannot import fails the build.
"""

import sys
from pathlib import Path

# The package of this checkout, whatever the environment has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tandv_tb  # noqa: E402

project = "tandv_tb"
release = tandv_tb.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Links to a heading of another page (`tab.md#block-scaled-formats-in-the-tab`), spelled
# as GitHub spells them.
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
html_theme = "pydata_sphinx_theme"
html_title = "tandv_tb"
templates_path = ["_templates"]
# Every page in the left sidebar, under its section's caption; the top bar keeps the search.
html_sidebars = {"**": ["sidebar-global.html"]}
html_theme_options = {"navbar_center": []}
