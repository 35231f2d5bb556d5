"""The style sheet and the one inline script of ``report.html`` (``infer/report_html.py``).

The filters need no script: each is a radio button, and the style sheet hides the rows without its flag (those
rules are made per page, for the pipeline's flags: ``report_html.filter_css``). The
script sorts the rows by a column (numbers by value), hides the rows a search does not match, and follows a link's
``#item=<id>`` (that row opened), ``#filter=<flag>`` and ``#fold=plots,run`` (sections folded), joined by ``&``.
"""

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1500px;
       padding: .6em 1.5em 3em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.45em; margin: .4em 0 .1em; }
h2 { font-size: 1.15em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin: 1.4em 0 .5em; }
h4 { margin: .9em 0 .3em; font-size: 1em; color: #24415f; }
table { border-collapse: collapse; margin: .3em 0; }
td, th { border: 1px solid #d8dee4; padding: .15em .5em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { font-weight: 500; color: #444; white-space: nowrap; }
.metrics { display: grid; grid-template-columns: repeat(auto-fill, minmax(21em, 1fr)); gap: 0 1.5em;
           max-width: 1100px; }
.metrics > div { display: flex; justify-content: space-between; border-bottom: 1px dotted #d0d7de; padding: .1em 0; }
.metrics b { font-variant-numeric: tabular-nums; margin-left: 1em; }
.metrics-tables { display: flex; flex-wrap: wrap; gap: 0 2em; align-items: flex-start; }
.note { color: #57606a; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; padding: .5em; margin: .3em 0;
      font-size: 12.5px; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plots figure { margin: 0; }
.plots img { max-width: 380px; width: 100%; border: 1px solid #d8dee4; }
figcaption { color: #57606a; font-size: .9em; }
details > summary { cursor: pointer; }
details.part > summary { list-style: none; }
details.part > summary::-webkit-details-marker { display: none; }
details.part > summary > h2::before { content: "▾ "; color: #8c959f; }
details.part:not([open]) > summary > h2::before { content: "▸ "; }
details.more { display: inline; }
details.more > summary { display: inline; color: #0969da; font-size: .9em; margin-left: .3em; }
.items-section > input { display: none; }
.filters { display: flex; gap: .4em; align-items: center; margin: .4em 0 .6em; flex-wrap: wrap; }
.filters label { border: 1px solid #afb8c1; border-radius: 1em; padding: .1em .8em; cursor: pointer; }
.filters input[type=search] { margin-left: 1em; padding: .2em .5em; min-width: 18em; border: 1px solid #afb8c1;
                              border-radius: 4px; }
.grid { display: grid; gap: .8em; align-items: baseline; }
.sticky { position: sticky; top: 0; background: #fff; z-index: 1; padding-top: .2em; }
.head { border-bottom: 2px solid #d0d7de; padding: .2em .4em; }
.item { scroll-margin-top: 5.5em; }
.head button { all: unset; cursor: pointer; font-weight: 600; color: #24415f; }
.head button:hover { text-decoration: underline; }
.head button[data-dir=asc]::after { content: " ▲"; }
.head button[data-dir=desc]::after { content: " ▼"; }
.item > summary { list-style: none; padding: .25em .4em; border-bottom: 1px solid #eaeef2; }
.item > summary::-webkit-details-marker { display: none; }
.item > summary > span { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.item > summary:hover { background: #f6f8fa; }
.item[open] > summary { background: #ddf4ff; }
.item .id { font-family: ui-monospace, monospace; font-size: .9em; }
.item > summary > span.id { white-space: normal; overflow-wrap: anywhere; }  /* the whole id: ids differ at the end */
.item > summary > span.flags { white-space: normal; }
.body { padding: .3em 1em 1em 1.2em; border-left: 3px solid #54aeff; margin: .2em 0 1em 1.2em; }
.flag { border-radius: 3px; padding: 0 .4em; font-size: .8em; margin-right: .3em; font-weight: 600;
        display: inline-block; white-space: nowrap; }
.flag.wrong { background: #ffebe9; color: #a40e26; }
.flag.abstained { background: #fff8c5; color: #7d4e00; }
.flag.error { background: #fbefff; color: #6639ba; }
.flag.abstained-right { background: #dafbe1; color: #116329; }
.flag.answered-wrong { background: #ffd8d3; color: #82071e; }
table.header { margin: .5em 0 .2em; }
table.header th { width: 10em; }
table.header code { font-size: .92em; overflow-wrap: anywhere; }
.glossary { margin: .6em 0; max-width: 1100px; }
.glossary > summary { color: #24415f; font-weight: 600; }
.glossary dl { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; margin: .3em 0; }
.glossary dt { font-weight: 600; }
.glossary dd { margin: 0; color: #444; }
.metrics span[title] { text-decoration: underline dotted #8c959f; cursor: help; }
table.confusion th.axis { background: #eaeef2; text-align: center; color: #24415f; }
table.confusion th.vertical { writing-mode: vertical-rl; transform: rotate(180deg); }
table.confusion td.diag { background: #dafbe1; font-weight: 600; }
.prompt .role { font-weight: 600; color: #24415f; margin-top: .4em; }
.row { display: flex; flex-wrap: wrap; gap: 0 2.5em; align-items: flex-start; }
tr.chosen td { background: #dafbe1; }
tr.gold td, .gold { color: #116329; font-weight: 600; }
.ok { color: #116329; font-weight: 600; }
.bad { color: #a40e26; font-weight: 600; }
"""

SCRIPT = """
(function () {
  const items = document.getElementById('items');
  const buttons = document.querySelectorAll('.head button');
  const key = (row, k) => {
    const cell = row.firstElementChild.children[k];
    return cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent;
  };
  buttons.forEach((button) => button.addEventListener('click', () => {
    const k = +button.dataset.k, desc = button.dataset.dir === 'asc';
    buttons.forEach((other) => delete other.dataset.dir);
    button.dataset.dir = desc ? 'desc' : 'asc';
    const rows = Array.from(items.children);
    rows.sort((a, b) => {
      const x = key(a, k), y = key(b, k), nx = parseFloat(x), ny = parseFloat(y);
      const d = !isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y);
      return desc ? -d : d;
    });
    const fragment = document.createDocumentFragment();
    rows.forEach((row) => fragment.appendChild(row));
    items.appendChild(fragment);
  }));
  const search = document.getElementById('search');
  search.addEventListener('input', () => {
    const wanted = search.value.toLowerCase();
    for (const row of items.children) row.hidden = !!wanted && !row.textContent.toLowerCase().includes(wanted);
  });
  // a link may say how to open the page: #item=<id> (that row opened), #filter=wrong|abstained|error,
  // #fold=plots,run (those top sections folded); several joined by &
  const link = new URLSearchParams(location.hash.slice(1));
  (link.get('fold') || '').split(',').forEach((id) => {
    const part = document.getElementById(id);
    if (part && part.tagName === 'DETAILS') part.open = false;
  });
  const radio = document.getElementById('f-' + (link.get('filter') || 'all'));
  if (radio) radio.checked = true;
  const wanted = link.get('item');
  const row = wanted && Array.from(items.children).find((r) => r.dataset.id === wanted);
  if (row) {
    row.open = true;
    if (row.getBoundingClientRect().top > innerHeight - 80) row.scrollIntoView();
  } else if (link.get('filter')) {
    document.getElementById('items-title').scrollIntoView();
  }
})();
"""
