/* Run in the book's one page before it is printed (memobook/pdf.py): makes every id
   unique (each page's ids get its name as a prefix: "views--view-vs-reshape"), points
   the links between the book's pages inside the book, unlinks those to pages the book
   leaves out, links every heading from a hidden list (Chromium writes a destination for
   each id a link points to, and pdf.py reads the pages of these), and returns the
   headings: the introduction and the parts (level 0), chapters and appendices (1),
   sections (2), subsections (3). An appendix's title gets its letter ("A. Errors"). */
() => {
  const pages = [...document.querySelectorAll("section.memo-pdf-page")];
  const names = new Set(pages.map((page) => page.dataset.page));

  const unlink = (a) => {
    const span = document.createElement("span");
    span.className = "memo-pdf-unlinked";
    span.append(...a.childNodes);
    a.replaceWith(span);
  };

  for (const link of document.querySelectorAll("a.headerlink")) {
    link.remove(); // the "#" after each heading
  }
  for (const page of pages) {
    const name = page.dataset.page;
    for (const element of page.querySelectorAll("[id]")) {
      element.id = `${name}--${element.id}`;
    }
    for (const a of [...page.querySelectorAll("a[href]")]) {
      const href = a.getAttribute("href");
      if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith("//")) {
        continue; // another site: the link stays
      }
      const [path, fragment] = href.split("#", 2);
      const target = path === "" ? name : path.replace(/\.html$/, "");
      if (path.includes("/") || (path !== "" && !path.endsWith(".html")) || !names.has(target)) {
        unlink(a); // a page the book leaves out, or a file of the site
      } else {
        a.setAttribute("href", fragment ? `#${target}--${fragment}` : `#${target}`);
      }
    }
  }

  const headings = [];
  const text = (element) => element.textContent.replace(/\s+/g, " ").trim();
  const entry = (level, heading, anchor) => {
    const number = heading.querySelector(".section-number");
    const numberText = number ? text(number) : "";
    const title = text(heading).slice(numberText.length).trim();
    headings.push({ level, number: numberText, title, anchor });
  };
  for (const page of pages) {
    const part = page.previousElementSibling;
    if (part && part.classList.contains("memo-pdf-part-title")) {
      headings.push({ level: 0, number: "", title: text(part), anchor: part.parentElement.id });
    }
    const title = page.querySelector("h1");
    if (page === pages[0]) {
      // The root page opens the book, beside the parts; the title page carries its title.
      title.textContent = "Introduction";
      entry(0, title, page.id);
      continue;
    }
    if (page.dataset.appendix) {
      // An appendix is numbered by its letter, as a chapter by its number.
      const number = document.createElement("span");
      number.className = "section-number";
      number.textContent = `${page.dataset.appendix}. `;
      title.prepend(number);
    }
    entry(1, title, page.id);
    for (const heading of page.querySelectorAll("h2, h3")) {
      const section = heading.closest("section[id]");
      entry(Number(heading.tagName[1]), heading, section.id);
    }
  }

  const targets = document.createElement("nav");
  targets.style.display = "none";
  for (const { anchor } of headings) {
    const a = document.createElement("a");
    a.href = `#${anchor}`;
    targets.append(a);
  }
  document.body.append(targets);
  return headings;
}
