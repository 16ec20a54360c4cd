"""Search that finds the section, used as a reader uses it in Chromium: a question or a
pasted error message on the search page, the first results, the page a result opens.

The search is Pagefind's index of every section (memobook/search.py) searched by
_static/memo-search.js. Each question below names the chapter sections that answer it,
read from the book; the error messages are those readers paste most (issue 25), and a
result answers one when its section prints or quotes the message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import parse_qs, quote_plus, urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page

import memobook
from tests.site.conftest import HTML
from tests.site.test_phone import OUTSIDE

CHAPTERS = {c.docname: c for c in memobook.chapters()}

QUESTIONS = [
    ("why does view fail after transpose", "book/views", {"view-vs-reshape"}),
    # Safe in two senses, each a section: a save that a crash cannot damage, and a
    # format that runs no code when loaded. Neither section writes the word "safely".
    (
        "save a checkpoint safely",
        "book/saving",
        {"crashes-truncated-files-and-flipped-bits", "safetensors-weights-without-pickle"},
    ),
    (
        "detach vs clone",
        "book/autograd",
        {
            "detach-same-memory-no-graph",
            "clone-a-copy-that-stays-in-the-graph",
            "clone-detach-or-detach-clone",
        },
    ),
    (
        "set seeds for reproducibility",
        "book/randomness",
        {"what-torch-manual-seed-seeds-and-what-it-does-not", "reproducible-across-runs-generator"},
    ),
    ("torch.compile recompiles", "book/compiling", {"recompiling-new-shapes-and-dynamic"}),
    (
        "bf16 vs fp16",
        "book/mixed_precision",
        {"four-floating-point-formats", "bfloat16-needs-no-gradscaler"},
    ),
    (
        "DataLoader workers give the same random numbers",
        "book/randomness",
        {"dataloader-workers-and-their-seeds"},
    ),
    (
        "register_buffer persistent",
        "book/buffers",
        {"persistent-false-a-buffer-left-out-of-the-checkpoint"},
    ),
    # Four more a reader would ask.
    ("should I apply softmax before cross entropy", "book/losses", {"logits-not-probabilities"}),
    (
        "is advanced indexing a copy or a view",
        "book/indexing",
        {"advanced-indexing-returns-copies"},
    ),
    (
        "load a GPU checkpoint on a CPU machine",
        "book/saving",
        {"map-location-and-to-where-tensors-land-and-where-the-model-is"},
    ),
    (
        "does model.eval() turn off gradients",
        "book/autograd_mechanics",
        {
            "no-grad-inference-mode-and-eval-which-is-not-a-grad-mode",
            # the training loop's section says so too: "it is not a grad mode"
            "book/training_loop#train-and-eval-what-they-switch",
            # and GPU memory's: "`eval()` is not a grad mode ... not whether autograd records"
            "book/gpu_memory#keeping-less-no-grad-inference-mode-checkpointing",
        },
    ),
]

INPLACE = (
    "one of the variables needed for gradient computation has been modified by an inplace operation"
)
# (what a reader pastes, the words of the message a section must print or quote)
ERRORS = [
    ("CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory"),
    (
        "Expected all tensors to be on the same device",
        "Expected all tensors to be on the same device",
    ),
    ("mat1 and mat2 shapes cannot be multiplied", "mat1 and mat2 shapes cannot be multiplied"),
    (INPLACE, INPLACE),
    ("CUDA error: device-side assert triggered", "device-side assert triggered"),
    (
        "view size is not compatible with input tensor's size and stride",
        "view size is not compatible with input tensor's size and stride",
    ),
    (
        "Trying to backward through the graph a second time",
        "Trying to backward through the graph a second time",
    ),
    ("expected scalar type Long but found Float", "expected scalar type Long but found Float"),
    (
        "element 0 of tensors does not require grad and does not have a grad_fn",
        "element 0 of tensors does not require grad and does not have a grad_fn",
    ),
    ("Error(s) in loading state_dict for Net", "Error(s) in loading state_dict"),
    (
        "DataLoader worker (pid 12345) is killed by signal: Bus error",
        "killed by signal: Bus error",
    ),
    (
        "Cannot re-initialize CUDA in forked subprocess",
        "Cannot re-initialize CUDA in forked subprocess",
    ),
    ("Weights only load failed", "Weights only load failed"),
    (
        "Can't call numpy() on Tensor that requires grad",
        "Can't call numpy() on Tensor that requires grad",
    ),
]

# The theme's interface text: none of it belongs in an excerpt.
NAVIGATION = re.compile(
    r"\b(Binder|Colab|Repository|Open issue|Contents|Show code cell (source|outputs)|"
    r"Print to PDF|Skip to main content|Back to top|Ctrl\+K|Search this book|"
    r"Toggle navigation)\b|\.ipynb\b"
)
# The page names the reference pages have; chapters come before them.
REFERENCE_PAGES = {"book/memo", "book/api", "book/status", "book/errors", "book/changes"}

# Done when either search has shown its results: this site's (#memo-search) or, where
# Pagefind cannot load, the theme's (#search-results).
_DONE = """() => document.querySelector('#memo-search[data-query]')
  || (document.querySelector('#search-results p.search-summary')?.textContent || '')
       .match(/finished|did not match/)"""
_RESULTS = """() => [...document.querySelectorAll('#memo-search li, #search-results li')]
  .filter(li => li.offsetParent !== null)
  .map(li => ({href: li.querySelector('a').href, title: li.querySelector('a').textContent.trim(),
               excerpt: (li.querySelector('p') || {textContent: ''}).textContent.trim()}))"""


@dataclass(frozen=True)
class Result:
    href: str
    title: str
    excerpt: str

    @property
    def page(self) -> str:
        """The page's name in the site (``book/views``)."""
        return urlsplit(self.href).path.lstrip("/").removesuffix(".html")

    @property
    def anchor(self) -> str:
        return urlsplit(self.href).fragment


class _Sections(HTMLParser):
    """The text of every ``<section id=...>`` of a page, its subsections' included."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str | None] = []
        self.texts: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.open.append(dict(attrs).get("id"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        for name in self.open:
            if name:
                self.texts.setdefault(name, []).append(data)


@functools.cache
def section_texts(page: str) -> dict[str, str]:
    """``{anchor: text}`` for the sections of a built page (``book/views``)."""
    parser = _Sections()
    parser.feed((HTML / f"{page}.html").read_text(encoding="utf-8"))
    return {name: "".join(parts) for name, parts in parser.texts.items()}


def search(page: Page, site_url: str, query: str) -> list[Result]:
    """The results the search page shows for ``query``, best first: typed into its box
    where ``page`` is on it already (the search runs in place), else by loading it."""
    if urlsplit(page.url).path == "/search.html" and page.locator("#memo-search").count():
        box = page.locator(".bd-search-container input[name=q]")
        box.fill(query)
        box.press("Enter")
        page.wait_for_function(
            "q => document.querySelector('#memo-search').dataset.query === q", arg=query
        )
    else:
        page.goto(f"{site_url}/search.html?q={quote_plus(query)}")
        page.wait_for_function(_DONE, timeout=30_000)
        if page.locator("#memo-search").count() == 0:
            page.wait_for_load_state("networkidle")  # the theme's search fetches excerpts
    return [Result(**found) for found in page.evaluate(_RESULTS)]


@pytest.fixture(scope="module")
def search_tab(desktop: BrowserContext) -> Iterator[Page]:
    """A 1280 x 900 tab that stays on the search page: the searches of the tests that
    use it follow one another in its box, as a reader's do (no page load each)."""
    tab = desktop.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.close()
    assert not errors, f"JavaScript errors on the search page: {errors}"


@pytest.mark.parametrize(
    ("question", "chapter", "sections"), QUESTIONS, ids=[q[0] for q in QUESTIONS]
)
def test_a_question_finds_the_section_and_opens_it_marked(
    search_tab: Page, page: Page, site_url: str, question: str, chapter: str, sections: set[str]
) -> None:
    results = search(search_tab, site_url, question)
    first = results[:3]
    assert first, f"no result for {question!r}"
    # A section of the chapter named, or one named with its page ("book/x#anchor").
    hit = next(
        (
            r
            for r in first
            if (r.page == chapter and r.anchor in sections) or f"{r.page}#{r.anchor}" in sections
        ),
        None,
    )
    assert hit is not None, f"{question!r}: none of {sections} in {chapter} among {first}"
    assert results[0].page in CHAPTERS, f"{question!r}: a chapter comes first, got {results[0]}"
    for result in first:
        assert result.excerpt, f"{question!r}: {result.title} has no excerpt"
        assert not NAVIGATION.search(result.excerpt), f"navigation in {result.excerpt!r}"
    words = parse_qs(urlsplit(hit.href).query).get("highlight", [""])[0].split()
    assert words, f"{hit.href} carries no words to mark"
    aliases = search_tab.evaluate("() => window.memoSearch.aliases")  # bf16: bfloat16, ...

    page.goto(hit.href)
    page.wait_for_load_state("load")
    arrived = page.evaluate(
        """anchor => {
          const section = document.getElementById(anchor);
          const marks = [...section.querySelectorAll('mark.memo-highlight')];
          const box = section.getBoundingClientRect();
          return {tag: section.tagName, marked: marks.map(m => m.textContent.toLowerCase()),
                  shown: marks.filter(m => m.checkVisibility()).length,
                  top: box.top, bottom: box.bottom, height: innerHeight};
        }""",
        hit.anchor,
    )
    assert arrived["tag"] == "SECTION", f"{hit.href} is not a section's anchor"
    assert arrived["top"] < arrived["height"], f"not scrolled to {hit.anchor}"
    assert arrived["bottom"] > 0, f"scrolled past {hit.anchor}"
    assert set(words) <= set(arrived["marked"]), f"{words} not all marked: {arrived['marked']}"
    assert arrived["shown"] > 0, "every marked word is folded away"
    asked = [w.lower() for w in re.findall(r"\w+", question) if len(w) > 3]
    asked += [a for w in asked for a in aliases.get(w, [])]
    assert any(m.startswith(w[:4]) for m in arrived["marked"] for w in asked), (
        f"{question!r}: the marked words {arrived['marked']} are not its words"
    )


@pytest.mark.parametrize(("pasted", "message"), ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_a_pasted_error_finds_its_entry_or_section(
    search_tab: Page, site_url: str, pasted: str, message: str
) -> None:
    results = search(search_tab, site_url, pasted)[:3]
    assert results, f"no result for {pasted!r}"
    texts = [section_texts(r.page).get(r.anchor, "") for r in results]
    wanted = " ".join(message.lower().split())
    answering = [
        r
        for r, text in zip(results, texts, strict=True)
        if (r.page in CHAPTERS or r.page == "book/errors")
        and wanted in " ".join(text.lower().replace("\u2019", "'").split())
    ]
    assert answering, f"{pasted!r}: no Errors entry or chapter section among {results}"


@pytest.mark.parametrize(
    ("term", "chapter"), [("channels_last", "book/creation"), ("register_buffer", "book/buffers")]
)
def test_a_name_finds_the_chapter_that_teaches_it(
    search_tab: Page, site_url: str, term: str, chapter: str
) -> None:
    assert chapter in [r.page for r in search(search_tab, site_url, term)[:3]]


def test_the_search_box_leads_to_the_results(page: Page, site_url: str) -> None:
    """The theme's search box (Ctrl+K) opens this search's results, at 1280 px; a
    chapter page does not load the theme's whole-site index to do it."""
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"{site_url}/book/views.html")
    page.wait_for_load_state("load")
    assert not [u for u in asked if "searchindex.js" in u or "searchtools.js" in u], asked
    page.keyboard.press("Control+k")
    box = page.locator("#pst-search-dialog input[name=q]")
    box.wait_for(state="visible")
    box.fill("register_buffer persistent")
    box.press("Enter")
    page.wait_for_url("**/search.html?q=*")
    page.wait_for_function(_DONE, timeout=30_000)
    assert page.locator("#memo-search li.memo-search-result").count() > 0
    assert page.locator("#search-results").is_hidden(), "the theme's results are replaced"


def test_the_search_makes_no_request_outside_the_site(page: Page, site_url: str) -> None:
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(site_url) else outside.append(r.url))
    results = search(page, site_url, "channels_last")
    assert results
    page.goto(results[0].href)
    page.wait_for_load_state("load")
    assert not outside, outside


def test_from_disk_the_themes_search_still_answers(desktop: BrowserContext) -> None:
    """Browsers refuse Pagefind's module on file:// pages: the theme's search runs there.
    (A tab of its own: the theme's search fails to fetch its excerpts from disk, which
    the other tabs' checks would count as script errors.)"""
    page = desktop.new_page()
    try:
        page.goto((HTML / "search.html").as_uri() + "?q=register_buffer")
        page.wait_for_function(_DONE, timeout=30_000)
        assert page.locator("#search-results ul.search li a").count() > 0
        assert page.locator("#memo-search").count() == 0
    finally:
        page.close()


def test_results_fit_a_phone(phone_page: Page, site_url: str) -> None:
    results = search(phone_page, site_url, "DataLoader workers give the same random numbers")
    assert results
    found = phone_page.evaluate(OUTSIDE, phone_page.locator("body").element_handle())
    assert found["scroll"] <= found["width"], f"the results scroll sideways: {found}"
    assert not found["outside"], f"past the screen's edge: {found['outside']}"
