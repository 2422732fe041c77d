"""The documentation as a reader gets it.

* It builds with warnings treated as errors (Sphinx ``-W``).
* Math renders without a network: every page with formulas loads MathJax from the built site,
  nothing is fetched from a CDN, and (where a Chromium is installed) no raw ``\\(``, ``\\[`` or
  ``$$`` is left in the text a browser shows once MathJax has run.
* The API reference is complete: every name in ``__all__`` of every subpackage is in the built
  index (``objects.inv``).
* The index page's gallery shows pictures that exist and link to pages that exist.

The site is built once per test run and shared by these tests (and by the pytest-xdist workers
of one run, through a lock file).
"""

import fcntl
import html.parser
import importlib
import json
import os
import pathlib
import pkgutil
import posixpath
import re
import shutil
import subprocess
import sys
import time
import zlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUBPACKAGES = ("models", "exact", "samplers", "diagnostics", "probabilistic", "quantum",
               "attention", "experiments", "testing")
NOT_API = {"cli"}  # the command line; documented by its --help and the guides
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _sphinx_build():
    exe = pathlib.Path(sys.executable).parent / "sphinx-build"
    return str(exe) if exe.exists() else shutil.which("sphinx-build")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Build the HTML once: ``(html folder, {"returncode", "output", "seconds"})``."""
    exe = _sphinx_build()
    if exe is None:
        pytest.skip("sphinx is not installed (pip install -e '.[dev]')")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder of this run, shared by its workers
    out = base / "docs-build"
    out.mkdir(exist_ok=True)
    with open(out / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result_path = out / "result.json"
        if not result_path.exists():
            t0 = time.perf_counter()
            proc = subprocess.run(
                [exe, "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"),
                 str(out / "html")], check=False, capture_output=True, text=True)
            result_path.write_text(json.dumps({
                "returncode": proc.returncode, "output": proc.stdout + proc.stderr,
                "seconds": time.perf_counter() - t0}))
        result = json.loads(result_path.read_text())
    if not (out / "html" / "index.html").exists():
        pytest.fail("the docs build wrote no index.html:\n" + result["output"])
    return out / "html", result


def _pages(html_dir):
    """The site's own pages (not the highlighted sources behind [source] links)."""
    return sorted(p for p in html_dir.rglob("*.html")
                  if not p.relative_to(html_dir).parts[0].startswith("_"))


class _Assets(html.parser.HTMLParser):
    """What a page loads: script sources, stylesheets, images."""

    def __init__(self):
        super().__init__()
        self.scripts, self.styles, self.images = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        elif tag == "link" and "stylesheet" in (a.get("rel") or "") and a.get("href"):
            self.styles.append(a["href"])
        elif tag == "img" and a.get("src"):
            self.images.append(a["src"])


def _assets(page):
    parser = _Assets()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _is_remote(url):
    return bool(re.match(r"^([a-z][a-z0-9+.-]*:)?//", url, re.IGNORECASE))


def _local_target(page, url):
    return (page.parent / url.split("?", 1)[0].split("#", 1)[0]).resolve()


def test_docs_build_without_warnings(site):
    _, result = site
    print(f"docs built in {result['seconds']:.1f} s")
    assert result["returncode"] == 0, result["output"]


def test_math_is_served_by_the_site(site):
    html_dir, _ = site
    with_math = [p for p in _pages(html_dir) if 'class="math' in p.read_text(encoding="utf-8")]
    assert len(with_math) >= 5, "expected formulas on the guides' pages"
    remote = []
    for page in _pages(html_dir):
        a = _assets(page)
        remote += [f"{page.relative_to(html_dir)}: {u}" for u in a.scripts + a.styles + a.images
                   if _is_remote(u)]
    assert not remote, "pages load files from the network:\n" + "\n".join(remote)
    for page in with_math:
        mathjax = [u for u in _assets(page).scripts if u.endswith("_static/mathjax/tex-chtml.js")]
        assert mathjax, f"{page.relative_to(html_dir)} has formulas but does not load MathJax"
        assert _local_target(page, mathjax[0]).is_file(), mathjax[0]
    fonts = html_dir / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), "MathJax's fonts are not in the built site"


_HARNESS = """<!doctype html>
<html><body><pre id="result">pending</pre><script>
const PAGES = %s;
const SKIP = new Set(["SCRIPT", "STYLE", "PRE", "CODE", "TEXTAREA"]);
const RAW = /\\\\\\(|\\\\\\[|\\$\\$|\\\\begin\\{/;
const sleep = ms => new Promise(r => setTimeout(r, ms));
function rawMath(doc) {
  const found = [];
  const walker = doc.createTreeWalker(doc.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    let e = n.parentElement;
    while (e && !SKIP.has(e.tagName)) e = e.parentElement;
    if (!e && RAW.test(n.nodeValue)) found.push(n.nodeValue.trim().slice(0, 100));
  }
  return found;
}
async function check(url) {
  const frame = document.createElement("iframe");
  document.body.appendChild(frame);
  await new Promise(resolve => { frame.onload = resolve; frame.src = url; });
  const win = frame.contentWindow;
  const ready = () => win.MathJax && win.MathJax.startup && win.MathJax.startup.promise;
  for (let i = 0; i < 400 && !ready(); i++) await sleep(50);
  if (!ready()) return {url: url, error: "MathJax did not start"};
  await win.MathJax.startup.promise;
  const doc = frame.contentDocument;
  const result = {url: url, math: doc.querySelectorAll(".math").length,
                  rendered: doc.querySelectorAll("mjx-container").length,
                  errors: Array.from(doc.querySelectorAll("mjx-merror"), e => e.textContent),
                  raw: rawMath(doc)};
  frame.remove();
  return result;
}
(async () => {
  const out = [];
  for (const url of PAGES) {
    try { out.push(await check(url)); } catch (e) { out.push({url: url, error: String(e)}); }
  }
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>
"""


def test_math_renders_in_a_browser(site, tmp_path):
    """What a reader sees: every page with formulas, opened in headless Chromium without a
    network, has them typeset by MathJax with no raw TeX left in its visible text."""
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        pytest.skip("no Chromium to render the pages (apt-get install chromium); the test "
                    "above still checks that MathJax is served by the site")
    html_dir, _ = site
    pages = [p for p in _pages(html_dir) if 'class="math' in p.read_text(encoding="utf-8")]
    harness = html_dir / "_math_check.html"
    harness.write_text(_HARNESS % json.dumps(
        [p.relative_to(html_dir).as_posix() for p in pages]), encoding="utf-8")
    try:
        proc = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--allow-file-access-from-files",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=120000",
             "--dump-dom", harness.as_uri()],
            check=False, capture_output=True, text=True, timeout=300)
    finally:
        harness.unlink()
    match = re.search(r'<pre id="result">(.*?)</pre>', proc.stdout, re.DOTALL)
    assert match and match.group(1) != "pending", (
        "the browser did not finish the check:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    results = json.loads(html.unescape(match.group(1)))
    assert len(results) == len(pages)
    bad = [r for r in results
           if r.get("error") or r["raw"] or r["errors"] or r["rendered"] < r["math"]]
    assert not bad, "math not rendered:\n" + "\n".join(map(json.dumps, bad))


def _inventory_names(path):
    """Object names in a Sphinx ``objects.inv`` (version 2: four header lines, then zlib)."""
    data = path.read_bytes()
    for _ in range(4):
        data = data[data.index(b"\n") + 1:]
    names = {}
    for line in zlib.decompress(data).decode("utf-8").splitlines():
        m = re.match(r"(?x)(.+?)\s+(\S+)\s+(-?\d+)\s+?(\S*)\s+(.*)", line)
        if m:
            names.setdefault(m.group(2), set()).add(m.group(1))
    return names


def test_every_subpackage_has_an_api_page():
    import isingattn

    found = {m.name for m in pkgutil.iter_modules(isingattn.__path__)
             if not m.name.startswith("_")}  # subpackages and public modules
    assert found - NOT_API == set(SUBPACKAGES), (
        "a new subpackage or public module needs a page under docs/api/ and a place in "
        "SUBPACKAGES")
    for name in SUBPACKAGES:
        assert (ROOT / "docs" / "api" / f"{name}.md").exists(), name


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_api_reference_documents_every_public_name(site, subpackage):
    html_dir, _ = site
    names = _inventory_names(html_dir / "objects.inv")
    documented = set().union(*(v for k, v in names.items() if k.startswith("py:")))
    module = importlib.import_module(f"isingattn.{subpackage}")
    missing = [n for n in module.__all__ if f"isingattn.{subpackage}.{n}" not in documented]
    assert not missing, (
        f"in isingattn.{subpackage}.__all__ but not in docs/api/{subpackage}.md: {missing}")


def test_gallery_pictures_exist_and_link_to_pages(site):
    html_dir, _ = site
    index = html_dir / "index.html"
    text = index.read_text(encoding="utf-8")
    cards = text.split("gallery-card")[1:]  # each piece: one card's picture and link
    assert len(cards) >= 4, "the index page shows at least four pictures"
    for card in cards:
        img = re.search(r'<img alt="[^"]+"[^>]*src="([^"]+)"', card)
        link = re.search(r'<a[^>]*href="([^"#]+)', card)
        assert img and _local_target(index, img.group(1)).is_file(), card[:300]
        assert link and _local_target(index, posixpath.normpath(link.group(1))).is_file(), \
            card[:300]
