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

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", memoSetUpSidebarToggles);
} else {
  memoSetUpSidebarToggles();
}
