/* Search that finds the section (the index: memobook/search.py, one record per section).

   On the search page (search.html?q=...), Pagefind's index replaces the theme's search:
   each word of the question is searched alone and the sections that hold most of the
   words, rare ones counting more, come first, even when they lack one (Pagefind alone
   wants every word in one record); the question is also searched as a phrase, so a
   pasted error message finds where it is printed. Each result is a section: its title, its page, an excerpt with the words
   marked, and a link to the section's anchor that carries the words (?highlight=).
   Where Pagefind cannot load (a page opened from disk, file://, where browsers refuse
   its module), the theme's own search runs as before.

   On every other page, ?highlight=WORDS marks those words in the article and opens the
   folded cells of the linked section that hold one. */
(() => {
  "use strict";

  const PARAM = "highlight";
  const RESULTS = 10;
  const EXCERPT_WORDS = 32;
  // A section that holds the whole question as a phrase (a pasted error message) counts
  // this many times; one of a reference page (memo, errors, API...) this fraction.
  const PHRASE_BONUS = 3;
  const REFERENCE_FACTOR = 0.3;
  const CANDIDATES = 30; // the best sections by their words, whose kind is then read
  // Words that say how a question is asked, not what it is about.
  const STOP_WORDS = new Set(
    ("a about after an and are as at be before by can do does did for from how i if in into " +
     "is it its me my of on or should so than that the their them then there these this to " +
     "vs was what when where which while who why will with without you your")
      .split(" "),
  );
  // The short names readers give torch's floating-point dtypes; the book writes torch's.
  const ALIASES = {
    bf16: ["bfloat16"], fp16: ["float16", "half"], fp32: ["float32"], fp64: ["float64", "double"],
  };

  const root = new URL(document.documentElement.dataset.content_root || "./", location.href);
  const wanted = new URLSearchParams(location.search).get(PARAM); // read before any script drops it

  /** The words of a question: lower case, outer punctuation trimmed, stop words left out
      (all of them kept when nothing else is left). */
  function words(query) {
    const all = query.toLowerCase().split(/\s+/)
      .map((w) => w.replace(/^[^\p{L}\p{N}_]+|[^\p{L}\p{N}_]+$/gu, ""))
      .filter((w) => w);
    const meaningful = all.filter((w) => !STOP_WORDS.has(w));
    return [...new Set(meaningful.length ? meaningful : all)];
  }

  /** The parts of a word that a reader's word may name: `torch.compile(model)` holds
      `torch`, `compile` and `model`; `register_buffer` holds itself and its halves. */
  function parts(token) {
    const found = token.match(/[\p{L}\p{N}_]+/gu) || [];
    return [...new Set([...found, ...found.flatMap((p) => p.split("_"))])].filter((p) => p);
  }

  /** Whether `form`, a word of a section, is a form of the searched `word` (Pagefind
      matched it by its stem or as a prefix): their first letters agree, all but the last
      3 of the shorter, at least 3. */
  function sameStem(form, word) {
    const a = form.toLowerCase();
    const b = word.toLowerCase();
    const stem = Math.max(3, Math.min(b.length, a.length) - 3);
    return a.length >= 2 && a.slice(0, stem) === b.slice(0, stem)
      && Math.abs(a.length - b.length) <= Math.max(4, b.length);
  }

  function escapeHtml(text) {
    return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  }

  async function loadPagefind() {
    const pagefind = await import(new URL("pagefind/pagefind.js", root).href);
    await pagefind.options({ baseUrl: root.pathname, excerptLength: EXCERPT_WORDS });
    return pagefind;
  }

  /** For one word (and its aliases): {record id: [share of the best score, result]}, and
      how many records hold it. */
  async function scores(pagefind, word) {
    const found = new Map();
    for (const form of [word, ...(ALIASES[word] || [])]) {
      const results = ((await pagefind.search(form)) || { results: [] }).results;
      const best = Math.max(1e-9, ...results.map((r) => r.score));
      for (const result of results) {
        const share = result.score / best;
        const known = found.get(result.id);
        if (!known || known[0] < share) found.set(result.id, [share, result]);
      }
    }
    return found;
  }

  /** Sections for `query`, best first, at most `limit`: [{data, rank, matched, locations}].

      Each word is searched alone. A section's score for a word is its share of the best
      section's score for it, times the word's rarity (log(1 + sections / sections that
      hold it)); its rank is the sum over the words, times the share of the words it
      holds, times PHRASE_BONUS where it holds the question as a phrase, times
      REFERENCE_FACTOR where it is not in a chapter. */
  async function searchSections(pagefind, query, limit = RESULTS) {
    const terms = words(query);
    if (!terms.length) return { terms, sections: [] };
    const total = Math.max(1, (await pagefind.search(null)).results.length);
    const found = new Map();
    for (const perWord of await Promise.all(terms.map((t) => scores(pagefind, t)))) {
      const rarity = Math.log(1 + total / Math.max(1, perWord.size));
      for (const [id, [share, result]] of perWord) {
        const entry = found.get(id) || { result, score: 0, matched: 0, locations: new Set() };
        entry.score += share * rarity;
        entry.matched += 1;
        result.words.forEach((l) => entry.locations.add(l));
        found.set(id, entry);
      }
    }
    const phrase = query.toLowerCase().replace(/[^\p{L}\p{N}_.\s]+/gu, " ").trim();
    if (terms.length > 1 && /\s/.test(phrase)) {
      for (const result of ((await pagefind.search(`"${phrase}"`)) || { results: [] }).results) {
        const entry = found.get(result.id);
        if (entry) entry.score *= PHRASE_BONUS;
      }
    }
    const candidates = [...found.values()]
      .map((e) => ({ ...e, rank: (e.score * e.matched) / terms.length }))
      .sort((a, b) => b.rank - a.rank)
      .slice(0, CANDIDATES);
    const loaded = await Promise.all(candidates.map(async (e) => {
      const data = await e.result.data();
      const factor = (data.meta || {}).kind === "chapter" ? 1 : REFERENCE_FACTOR;
      const locations = [...e.locations].sort((a, b) => a - b);
      return { data, rank: e.rank * factor, matched: e.matched, locations };
    }));
    return { terms, sections: loaded.sort((a, b) => b.rank - a.rank).slice(0, limit) };
  }

  /** Where a record's own words are, in its `content` split on spaces: after its title,
      before its context (the titles around it, its last words). */
  function body(data) {
    const all = data.content.split(/\s+/);
    const count = (text) => (text || "").split(/\s+/).filter((w) => w).length;
    const end = all.length - count(data.meta.context);
    const start = Math.min(count(data.meta.title), end);
    return { all, start, end };
  }

  /** The words of the section around most of `locations`, those marked. */
  function excerpt(data, locations) {
    const { all, start: first, end: last } = body(data);
    const inside = locations.filter((l) => l >= first && l < last);
    const marks = new Set(inside);
    let start = first;
    let best = -1;
    for (const l of inside) {
      const from = Math.max(first, Math.min(l - 6, last - EXCERPT_WORDS));
      const count = inside.filter((m) => m >= from && m < from + EXCERPT_WORDS).length;
      if (count > best) {
        best = count;
        start = from;
      }
    }
    const end = Math.min(last, start + EXCERPT_WORDS);
    const shown = all.slice(start, end).map((w, i) => {
      const text = escapeHtml(w);
      return marks.has(start + i) ? `<mark>${text}</mark>` : text;
    });
    return (start > first ? "… " : "") + shown.join(" ") + (end < last ? " …" : "");
  }

  /** The forms of the searched words as the section writes them (`recompiles` finds
      `recompilation`, `register_buffer` itself, `fp16` finds `float16`): what the
      linked page marks. A name with underscores counts whole where it matches whole. */
  function forms(data, locations, terms) {
    const { all, start, end } = body(data);
    const found = new Set();
    const sought = terms.flatMap((t) => [t, ...(ALIASES[t] || [])]).flatMap(parts);
    const matches = (form) => sought.some((w) => sameStem(form, w));
    for (const l of locations.filter((m) => m >= start && m < end)) {
      for (const run of (all[l] || "").match(/[\p{L}\p{N}_]+/gu) || []) {
        const hits = matches(run) ? [run] : run.split("_").filter((half) => half && matches(half));
        hits.forEach((h) => found.add(h.toLowerCase()));
      }
    }
    return [...found];
  }

  function link(href, marked) {
    const url = new URL(href, root);
    url.searchParams.set(PARAM, marked.join(" "));
    return url.href;
  }

  function render(container, query, outcome) {
    const list = document.createElement("ol");
    list.className = "memo-search-results";
    for (const { data, locations } of outcome.sections) {
      const meta = data.meta || {};
      const title = meta.title || "";
      const item = document.createElement("li");
      item.className = `memo-search-result memo-search-${meta.kind || "chapter"}`;
      const anchor = document.createElement("a");
      anchor.className = "memo-search-link";
      const marked = forms(data, locations, outcome.terms);
      anchor.href = marked.length ? link(meta.href, marked) : new URL(meta.href, root).href;
      anchor.textContent = title;
      const page = document.createElement("span");
      page.className = "memo-search-page";
      page.textContent = meta.context || meta.page || "";
      const text = document.createElement("p");
      text.className = "memo-search-excerpt";
      text.innerHTML = excerpt(data, locations);
      item.append(anchor, page, text);
      list.append(item);
    }
    const summary = document.createElement("p");
    summary.className = "memo-search-summary";
    summary.textContent = outcome.sections.length
      ? `Sections that match ${outcome.terms.join(", ")}, best first:`
      : `No section matches ${outcome.terms.join(", ") || "this search"}.`;
    container.replaceChildren(summary, list);
    container.dataset.query = query;
  }

  /** The search page's own box searches in place, as you type (and on Enter), and keeps
      the address (?q=) in step, so the results can be shared and reloaded. */
  function liveSearch(pagefind, container) {
    const form = document.querySelector(".bd-search-container form.bd-search");
    const input = form && form.querySelector("input[name=q]");
    if (!input) return;
    let latest = 0;
    let timer = null;
    const run = async () => {
      const query = input.value.trim();
      const ticket = ++latest;
      const outcome = query ? await searchSections(pagefind, query) : null;
      if (ticket !== latest) return; // a later search has started
      if (outcome) {
        render(container, query, outcome);
      } else {
        container.replaceChildren();
        delete container.dataset.query;
      }
      history.replaceState(null, "", query ? `?q=${encodeURIComponent(query)}` : location.pathname);
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      clearTimeout(timer);
      run();
    });
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(run, 300);
    });
  }

  function onSearchPage() {
    const query = new URLSearchParams(location.search).get("q");
    const results = document.getElementById("search-results");
    if (!results || !/^https?:$/.test(location.protocol)) return; // the theme's search
    const sphinx = typeof Search !== "undefined" ? Search : null;
    const original = sphinx && sphinx.performSearch;
    if (sphinx) sphinx.performSearch = () => {}; // until Pagefind has loaded, or failed
    const container = document.createElement("section");
    container.id = "memo-search";
    container.setAttribute("aria-live", "polite");
    results.before(container);
    results.hidden = true;
    loadPagefind().then(async (pagefind) => {
      // For the site's tests: the search itself, and the abbreviations it expands.
      window.memoSearch = { search: (q, limit) => searchSections(pagefind, q, limit), aliases: ALIASES };
      liveSearch(pagefind, container);
      if (!query) return;
      render(container, query, await searchSections(pagefind, query));
    }).catch((error) => {
      console.warn("Pagefind did not load; the theme's search runs instead:", error);
      container.remove();
      results.hidden = false;
      if (sphinx && original) {
        sphinx.performSearch = original;
        if (query) original(query);
      }
    });
  }

  /** Mark the searched words in the article, and open the folded cells of the linked
      section that hold one. */
  function highlight() {
    if (!wanted) return;
    const terms = wanted.toLowerCase().split(/\s+/).filter((w) => w);
    const article = document.querySelector("article.bd-article") || document.querySelector("main");
    if (!terms.length || !article) return;
    const escaped = terms
      .sort((a, b) => b.length - a.length) // `worker_init_fn` before `worker`
      .map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(${escaped.join("|")})(?![\\p{L}\\p{N}])`, "giu");
    const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT, {
      acceptNode: (node) => (node.parentElement.closest("script, style, button, .headerlink, mark")
        ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    const texts = [];
    while (walker.nextNode()) texts.push(walker.currentNode);
    for (const node of texts) {
      const value = node.nodeValue;
      pattern.lastIndex = 0;
      if (!pattern.test(value)) continue;
      pattern.lastIndex = 0;
      const fragment = document.createDocumentFragment();
      let last = 0;
      for (const match of value.matchAll(pattern)) {
        fragment.append(value.slice(last, match.index));
        const mark = document.createElement("mark");
        mark.className = "memo-highlight";
        mark.textContent = match[0];
        fragment.append(mark);
        last = match.index + match[0].length;
      }
      fragment.append(value.slice(last));
      node.replaceWith(fragment);
    }
    const target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (target) {
      for (const mark of target.querySelectorAll("mark.memo-highlight")) {
        const folded = mark.closest("details:not([open])");
        if (folded && folded.closest("section") === target) folded.open = true;
      }
      target.scrollIntoView();
    }
  }

  function start() {
    if (document.getElementById("search-results") && document.querySelector(".bd-search-container")) {
      onSearchPage();
    } else {
      highlight();
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
