/* fedhet's changes to Snakemake's report app, run by `python -m fedhet.report` (the `report`
   rule) just before the app starts; each leaves the app as it was where the template differs
   from the one it was written for (Snakemake 9's).

   1. The sidebar keeps the order the page's data gives (python -m fedhet.report orders it as
      the papers do: the scorecard, then each paper's tables, then its figures) instead of
      sorting every list as text.
   2. The sidebar's header names the report (the tab's title), not "Snakemake Report".
   3. A figure is shown with its caption (what it shows, what stood in for what at this scale)
      under it; a click on it shows it at its full size (the pane scrolls), another fits it to
      the pane again. */
(function () {
  "use strict";

  // 1. The template sorts with String.prototype.localeCompare; while these methods run, every
  // comparison says "equal" and the (stable) sort keeps the data's order.
  function inDataOrder(cls, method) {
    if (typeof cls !== "function" || typeof cls.prototype[method] !== "function") return;
    const original = cls.prototype[method];
    cls.prototype[method] = function (...args) {
      const compare = String.prototype.localeCompare;
      String.prototype.localeCompare = function () { return 0; };
      try {
        return original.apply(this, args);
      } finally {
        String.prototype.localeCompare = compare;
      }
    };
  }
  inDataOrder(typeof Menu === "undefined" ? undefined : Menu, "getCategoryMenumitems");
  inDataOrder(typeof Category === "undefined" ? undefined : Category, "getSubcategoryMenuitems");
  inDataOrder(typeof AbstractResults === "undefined" ? undefined : AbstractResults, "getData");

  // 2. The header: [logo, "Snakemake", "Report", hide button] → [the report's name, button].
  if (typeof Navbar === "function") {
    const render = Navbar.prototype.render;
    Navbar.prototype.render = function () {
      const out = render.call(this);
      try {
        const nav = out[1];
        const [header, ...rest] = React.Children.toArray(nav.props.children);
        const parts = React.Children.toArray(header.props.children);
        const name = e("span", { className: "grow mr-5 font-bold fedhet-title" },
                       document.title);
        return [out[0], React.cloneElement(nav, {}, React.cloneElement(
          header, {}, name, parts[parts.length - 1]), ...rest)];
      } catch (err) {
        return out;
      }
    };
  }

  // 3. A figure with its caption; a click toggles its full size.
  if (typeof ContentDisplay === "function") {
    const renderContent = ContentDisplay.prototype.renderContent;
    ContentDisplay.prototype.renderContent = function () {
      const state = this.props.app.state;
      if (state.content !== "img") return renderContent.call(this);
      const result = (typeof results === "object" && results[state.resultPath]) || {};
      return e(
        "figure",
        { className: "p-3 fedhet-figure", key: state.resultPath || state.contentPath },
        e("img", {
          src: state.contentPath,
          title: "Click: full size (the pane scrolls); click again: fit the pane",
          onClick: (event) => event.currentTarget.classList.toggle("fedhet-full"),
        }),
        result.caption ? e("figcaption", {
          className: "prose prose-sm fedhet-caption",
          dangerouslySetInnerHTML: { __html: result.caption },
        }) : null
      );
    };
  }
})();
