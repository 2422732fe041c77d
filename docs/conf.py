"""Sphinx configuration: MyST pages, autodoc API reference, a pydata-family theme (the one
JAX's docs use), MathJax served from the built site (no network at view time)."""

import ast
import importlib.util
import pathlib
import pkgutil
import shutil

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

project = "isingattn"
author = "the isingattn developers"
copyright = "2026, the isingattn developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx_design",
    "sphinx_copybutton",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
exclude_patterns = ["_build", "results/*/**"]  # result folders: tables, plots, runs (pages include them)
autodoc_member_order = "bysource"
autodoc_typehints = "none"
napoleon_google_docstring = True
suppress_warnings = ["myst.header"]
nitpicky = False
autodoc_inherit_docstrings = False  # inherited dict attributes would render dict.__doc__

# -- HTML ------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "isingattn"
html_static_path = ["_static"]
html_css_files = ["isingattn.css"]
html_theme_options = {
    "home_page_in_toc": False,
    "show_navbar_depth": 1,
    "max_navbar_depth": 2,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "navbar_persistent": [],  # the sidebar has the search field; no second one in a top bar
}
# No site navigation in the highlighted sources behind the [source] links: they are most of the
# pages, and rendering the navigation into each of them cost about a quarter of the build.
html_sidebars = {"_modules/**": ["navbar-logo.html", "search-button-field.html"]}
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True

# -- Math: MathJax 3 from the built site ------------------------------------------------------
# The CDN default would leave every formula as raw LaTeX for a reader without network. The
# files come from the sphinx-mathjax-offline wheel (MathJax 3.2); only the TeX-to-CHTML bundle
# and what it loads on demand (TeX extensions, fonts, menu, accessibility) are copied.
mathjax_path = "mathjax/tex-chtml.js"
_MATHJAX_PARTS = ["tex-chtml.js", "input/tex/extensions", "output/chtml", "ui", "a11y", "sre",
                  "adaptors"]


def _mathjax_source() -> pathlib.Path:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the docs need MathJax from the sphinx-mathjax-offline package: "
                           "pip install -e '.[dev]'")
    return pathlib.Path(spec.origin).parent / "static" / "mathjax"


def _copy_mathjax(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    src, dst = _mathjax_source(), pathlib.Path(app.outdir) / "_static" / "mathjax"
    for part in _MATHJAX_PARTS:
        s, d = src / part, dst / part
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            shutil.copy2(s, d)


# -- API reference: constants re-exported by the packages ------------------------------------
# A constant's doc comment (``#:``) sits in the private module that defines it; autodoc looks
# for it in the package that re-exports it and, finding none, would print the docstring of its
# type (``tuple``, ``float``). Follow the package's ``from ._x import NAME`` to the comment.
_ANALYZERS = {}


def _attr_comment(modname, attr, depth=0):
    if modname not in _ANALYZERS:
        try:
            analyzer = ModuleAnalyzer.for_module(modname)
            analyzer.analyze()
        except PycodeError:
            analyzer = None
        _ANALYZERS[modname] = analyzer
    analyzer = _ANALYZERS[modname]
    if analyzer is None:
        return None
    comment = analyzer.attr_docs.get(("", attr))
    if comment or depth > 3:
        return list(comment) if comment else None
    package = modname if analyzer.srcname.endswith("__init__.py") else modname.rpartition(".")[0]
    for node in ast.walk(ast.parse(analyzer.code)):
        if isinstance(node, ast.ImportFrom) and node.level:
            for alias in node.names:
                if (alias.asname or alias.name) == attr:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    target = f"{base}.{node.module}" if node.module else base
                    return _attr_comment(target, alias.name, depth + 1)
    if depth == 0 and analyzer.srcname.endswith("__init__.py"):  # served lazily (__getattr__)
        for sub in pkgutil.iter_modules([str(pathlib.Path(analyzer.srcname).parent)]):
            found = _attr_comment(f"{modname}.{sub.name}", attr, depth + 1)
            if found:
                return found
    return None


def _constant_docstring(app, what, name, obj, options, lines):
    if what != "data" or not name.startswith("isingattn."):
        return
    modname, _, attr = name.rpartition(".")
    lines[:] = _attr_comment(modname, attr) or []


def _skip_namedtuple_aliases(app, what, name, obj, skip, options):
    # "Alias for field number 0": the fields are described in the class docstrings
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


# -- The index page's gallery -----------------------------------------------------------------
class Gallery(SphinxDirective):
    """Picture cards linking to pages, one per content line ``image | page | title``; an entry
    whose image does not exist (yet) is left out, so a results page can add its picture later."""

    has_content = True

    def run(self):
        here = pathlib.Path(self.env.doc2path(self.env.docname)).parent
        cards = []
        for line in self.content:
            if not line.strip():
                continue
            image, page, title = (part.strip() for part in line.split("|", 2))
            self.env.note_dependency(str(here / image))  # a missing one: re-read every build
            if not (here / image).is_file():
                continue
            cards += [f":::{{grid-item-card}} {title}", f":img-top: {image}",
                      f":img-alt: {title}", f":link: {page}", ":link-type: doc",
                      ":class-card: gallery-card", ":::"]
        text = ["::::{grid} 1 2 3 3", ":gutter: 3", *cards, "::::"]
        holder = nodes.container(classes=["gallery"])
        self.state.nested_parse(StringList(text, source=self.get_source_info()[0]),
                                self.content_offset, holder)
        return [holder]


def setup(app):
    _mathjax_source()  # fail early, with the fix, rather than after the whole build
    app.add_directive("gallery", Gallery)
    app.connect("autodoc-process-docstring", _constant_docstring)
    app.connect("autodoc-skip-member", _skip_namedtuple_aliases)
    app.connect("build-finished", _copy_mathjax)
