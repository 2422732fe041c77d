project = "isingattn"
author = "the isingattn developers"
copyright = "2026, the isingattn developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
exclude_patterns = ["_build", "results/*/**"]  # result folders: tables, plots, runs (pages include them)
autodoc_member_order = "bysource"
autodoc_typehints = "none"
napoleon_google_docstring = True
html_theme = "alabaster"
suppress_warnings = ["myst.header"]
nitpicky = False
autodoc_inherit_docstrings = False  # inherited dict attributes would render dict.__doc__
