"""The documentation builds offline with warnings as errors, has a reference page for every
public name, a gallery with at least six figures, no broken internal links (the
highlighted-source pages included) and nothing that a page loads from elsewhere (MathJax
comes with the site); a gallery example that fails stops the build.

The build runs in a subprocess on a copy of doc/ and examples/ in a temporary folder (so that
the generated files of a previous build cannot hide a problem), with this checkout's package
first on the path.
"""
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import pytest

for mod in ("sphinx", "sphinx_gallery", "numpydoc", "pydata_sphinx_theme", "myst_parser",
            "matplotlib"):
    pytest.importorskip(mod)

pytestmark = pytest.mark.slow    # a Sphinx build in a subprocess

from _reference import ROOT  # noqa: E402 - the repository root


def _env():
    from _reference import checkout_env
    return checkout_env(MPLBACKEND="agg")


def _copy_sources(dest):
    shutil.copytree(ROOT / "doc", dest / "doc",
                    ignore=shutil.ignore_patterns("_build", "generated", "auto_examples",
                                                  "__pycache__"))
    shutil.copytree(ROOT / "examples", dest / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "README.md", dest / "benchmarks" / "README.md")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    _copy_sources(tmp)
    out = tmp / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp / "doctrees"), str(tmp / "doc"), str(out)]
    r = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    return out


def test_every_public_name_has_a_page(built_site):
    from test_doctests import public_objects
    missing = [name for name in public_objects()
               if not (built_site / "api" / "generated" / f"{name}.html").is_file()]
    assert not missing, f"no reference page for {missing}"
    # the pages hold the docstrings (with their examples), not empty stubs
    page = (built_site / "api" / "generated" / "sktensor_fast.CPAPR.html").read_text()
    assert "log_likelihood_" in page and "Examples" in page and "pdnr" in page
    page = (built_site / "api" / "generated" / "sktensor_fast.SparseTensor.html").read_text()
    assert "from_dense" in page


def test_gallery_made_figures(built_site):
    images = built_site / "_images"
    figures = [p for p in images.glob("sphx_glr_plot_*.png") if "_thumb" not in p.name]
    examples = sorted(p.stem for p in (ROOT / "examples").glob("plot_*.py"))
    assert len(examples) >= 6
    assert len(figures) >= 6, sorted(p.name for p in figures)
    for ex in examples:
        page = built_site / "auto_examples" / f"{ex}.html"
        assert page.is_file(), ex
        assert any(p.name.startswith(f"sphx_glr_{ex}_") for p in figures), f"{ex} drew nothing"
    # the flights example drew the components with the data set's labels
    page = (built_site / "auto_examples" / "plot_flights_components.html").read_text()
    assert "15188 nonzeros" in page and "JFK" in page


def test_guide_pages_and_home(built_site):
    for page in ("index", "guide/index", "guide/choosing", "guide/solvers", "guide/rank",
                 "guide/sklearn", "guide/devices", "guide/performance", "guide/kernels",
                 "guide/install", "guide/references", "guide/tuning", "guide/developer",
                 "benchmarks", "api/index",
                 "auto_examples/index"):
        assert (built_site / f"{page}.html").is_file(), page
    home = (built_site / "index.html").read_text()
    # doc/index.md is the home page, with the site's navigation
    assert "sktensor_fast documentation" in home
    for section in ("guide/index.html", "auto_examples/index.html", "api/index.html"):
        assert section in home, section


#: relations of a <link> to another document, which the browser does not load into the page
NAVIGATION_RELS = {"canonical", "alternate", "author", "help", "index", "license", "next",
                   "prev", "search", "top", "up", "copyright"}
#: the attribute of each element that makes the browser fetch something for the page
RESOURCE_ATTRS = {"script": "src", "img": "src", "iframe": "src", "source": "src",
                  "audio": "src", "video": "src", "embed": "src", "object": "data",
                  "link": "href"}


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids, self.resources = [], set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and key == "href"
                                       and attrs.get("rel") in (["preconnect"],)):
                self.links.append((tag, key, attrs[key]))
        key = RESOURCE_ATTRS.get(tag)
        if key and attrs.get(key) and not (
                tag == "link" and set((attrs.get("rel") or "").split()) <= NAVIGATION_RELS
                and attrs.get("rel")):
            self.resources.append((tag, attrs[key]))


def _parse(path, cache):
    if path not in cache:
        p = _Links()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = p
    return cache[path]


def broken_links(site):
    """Local links and images of the HTML pages under ``site`` whose file (or anchor in a
    page) does not exist."""
    cache, broken = {}, []
    for page in sorted(site.rglob("*.html")):
        if {"_static", "_sources"} & set(page.relative_to(site).parts):
            continue            # theme templates, page sources
        for tag, key, url in _parse(page, cache).links:
            parts = urlsplit(url)
            if parts.scheme or url.startswith(("//", "mailto:", "javascript:", "data:")):
                continue
            target = page if not parts.path else (page.parent / unquote(parts.path)).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {url}")
                continue
            if parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in _parse(target, cache).ids:
                    broken.append(f"{page.relative_to(site)}: {url} (no such anchor)")
    return broken


def _is_external(url):
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") or url.strip().startswith("//")


#: addresses in style sheets and style attributes: url(...) and @import "..."
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")


def external_resources(site):
    """What the pages under ``site`` make the browser fetch from another site (a CDN): the
    scripts, style sheets, images, frames and fonts of the HTML pages and style sheets."""
    cache, found = {}, []
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site)
        for tag, url in _parse(page, cache).resources:
            if _is_external(url):
                found.append(f"{rel}: <{tag}> {url}")
        for url in CSS_URL.findall(page.read_text(encoding="utf-8", errors="replace")):
            if _is_external(url):
                found.append(f"{rel}: url({url})")
    for sheet in sorted(site.rglob("*.css")):
        for url in CSS_URL.findall(sheet.read_text(encoding="utf-8", errors="replace")):
            if _is_external(url):
                found.append(f"{sheet.relative_to(site)}: url({url})")
    return found


def test_resource_checker_finds_cdn_references(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "index.html").write_text(
        '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
        '<script src="_static/local.js"></script><img src="a.png">'
        '<link rel="stylesheet" href="//fonts.example.org/css">'
        '<link rel="canonical" href="https://example.org/index.html">'
        '<link rel="preconnect" href="https://cdn.example.org">'
        '<a href="https://example.org/paper">a reference</a>'
        '<div style="background: url(\'https://example.org/b.png\')"></div>')
    (tmp_path / "_static" / "theme.css").write_text(
        '@import "https://fonts.example.org/font.css";\n'
        '.x { background: url(../a.png); } .y { src: url("//cdn.example.org/f.woff2"); }')
    assert external_resources(tmp_path) == [
        "index.html: <script> https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
        "index.html: <link> //fonts.example.org/css",
        "index.html: <link> https://cdn.example.org",
        "index.html: url(https://example.org/b.png)",
        "_static/theme.css: url(https://fonts.example.org/font.css)",
        "_static/theme.css: url(//cdn.example.org/f.woff2)"]


def test_link_checker_finds_broken_links(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a><img src="a.png"><a href="https://x.org/y">ext</a>'
        '<a href="missing.html">1</a><img src="b.png"><a href="sub/page.html#nowhere">2</a>'
        '<a href="#top">3</a>')
    (tmp_path / "sub" / "page.html").write_text('<h1 id="here">x</h1><a href="../index.html">')
    assert sorted(broken_links(tmp_path)) == [
        "index.html: #top (no such anchor)", "index.html: b.png", "index.html: missing.html",
        "index.html: sub/page.html#nowhere (no such anchor)"]


def test_no_broken_internal_links(built_site):
    assert len(list(built_site.rglob("*.html"))) > 20
    # the highlighted source is checked too: its [docs] links lead to the objects' anchors
    assert len(list((built_site / "_modules").rglob("*.html"))) > 10
    broken = broken_links(built_site)
    assert not broken, "\n".join(broken[:50])


def test_nothing_loaded_from_elsewhere(built_site):
    """The site works offline: no page loads a script, style sheet, image or font from
    another site, and the equations are typeset by the MathJax that comes with it."""
    found = external_resources(built_site)
    assert not found, "\n".join(found[:50])
    page = built_site / "guide" / "choosing.html"
    links = _parse(page, {})
    assert 'class="math' in page.read_text()
    scripts = [url for tag, url in links.resources if tag == "script" and "mathjax" in url]
    assert scripts, "no MathJax on a page with an equation"
    for url in scripts:
        assert (page.parent / urlsplit(url).path).resolve().is_file(), url


def test_linkcheck_runs_offline(built_site):
    """``-b linkcheck`` on the built sources: external addresses are ignored (conf.py's
    ``linkcheck_ignore``), so it needs no network, and no link is reported broken."""
    import json
    tmp = built_site.parent
    out = tmp / "linkcheck"
    cmd = [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "linkcheck",
           "-d", str(tmp / "doctrees"), str(tmp / "doc"), str(out)]
    r = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    rows = [json.loads(line) for line in (out / "output.json").read_text().splitlines()
            if line.strip()]
    assert rows, "linkcheck saw no links"
    bad = [row for row in rows if row["status"] not in ("unchecked", "ignored", "working")]
    assert not bad, bad[:20]
    fetched = [row for row in rows if row["uri"].startswith(("http:", "https:"))
               and row["status"] != "ignored"]
    assert not fetched, fetched[:5]


def test_failing_example_stops_the_build(tmp_path):
    """An example that cannot find its data file fails the build loudly."""
    src = tmp_path / "doc"
    src.mkdir()
    ex = tmp_path / "examples"
    ex.mkdir()
    (ex / "README.txt").write_text("Examples\n========\n")
    (ex / "plot_missing.py").write_text(textwrap.dedent('''
        """
        A missing file
        ==============
        """
        from sktensor_fast import load_tns
        X = load_tns("no-such-tensor-file.tns")
        '''))
    (src / "index.rst").write_text("Test\n====\n\n.. toctree::\n\n   auto_examples/index\n")
    (src / "conf.py").write_text(textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(ROOT / "doc" / "sphinxext")!r})
        from gallery_conf import gallery_conf
        extensions = ["sphinx_gallery.gen_gallery"]
        sphinx_gallery_conf = gallery_conf({str(ex)!r}, backreferences=False)
        '''))
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src),
                        str(tmp_path / "html")], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "no-such-tensor-file.tns" in out, out[-3000:]
