/* pytorch-memo site behaviour. */

/* Sidebar toggles. pydata-sphinx-theme 0.17 listens only to the FIRST element with class
   `primary-toggle` (or `secondary-toggle`) in the page, and since 0.17 that is a button of
   its own, hidden in the header, while sphinx-book-theme renders the visible ones; so the
   visible buttons only showed a tooltip: pydata/pydata-sphinx-theme#2451,
   executablebooks/sphinx-book-theme#988. Here every other toggle works: where its sidebar
   is shown beside the article (wide screens) it hides or shows it; where the sidebar is
   folded away (phones) it opens the theme's drawer, by clicking the button the theme
   listens to. Remove this when the themes are fixed (tests/site/test_phone.py checks it). */
function memoSetUpSidebarToggles() {
  const sides = [
    [".primary-toggle", "pst-primary-sidebar", "memo-hide-primary"],
    [".secondary-toggle", "pst-secondary-sidebar", "memo-hide-secondary"],
  ];
  for (const [selector, sidebarId, hiddenClass] of sides) {
    const buttons = Array.from(document.querySelectorAll(selector));
    const wired = buttons[0];
    for (const button of buttons.slice(1)) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        const sidebar = document.getElementById(sidebarId);
        const box = sidebar ? sidebar.getBoundingClientRect() : null;
        const docked = document.documentElement.classList.contains(hiddenClass)
          || (box && box.width > 0 && box.right > 0 && box.left < window.innerWidth
              && getComputedStyle(sidebar).visibility !== "hidden"
              && getComputedStyle(sidebar).display !== "none");
        if (docked) {
          document.documentElement.classList.toggle(hiddenClass);
        } else if (wired) {
          wired.click();
        }
      });
    }
  }
}

/* The memo's filter box: as the reader types, only the claims and summary points that
   hold every word typed stay (case ignored); a section, summary or chapter left empty
   hides, and a line says how many claims match. */
function memoSetUpFilter() {
  const input = document.getElementById("memo-filter");
  if (!input) {
    return;
  }
  const count = document.querySelector(".memo-filter-count");
  const items = Array.from(document.querySelectorAll("li.memo-claim, ul.memo-summary-points > li"));
  const texts = items.map((item) => {
    const claim = item.querySelector(".memo-claim-text");
    return (claim || item).textContent.replace(/\s+/g, " ").toLowerCase();
  });
  const claims = document.querySelectorAll("li.memo-claim").length;
  const update = () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    items.forEach((item, index) => {
      const match = words.every((word) => texts[index].includes(word));
      item.hidden = !match;
      if (match && item.classList.contains("memo-claim")) {
        shown += 1;
      }
    });
    for (const box of document.querySelectorAll(".memo-group, section.memo-chapter")) {
      box.hidden = !box.querySelector("li:not([hidden])");
    }
    count.textContent = words.length ? `${shown} of ${claims} claims match.` : "";
  };
  input.addEventListener("input", update);
  update();
}

function memoSetUp() {
  memoSetUpSidebarToggles();
  memoSetUpFilter();
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", memoSetUp);
} else {
  memoSetUp();
}
