"""Draw one Plotly figure in headless Chromium and measure what a reader would see: are the labels all there, apart,
and clear of titles and colour bars?

The page is fig.to_html with the plotly.js bundled in the installed plotly package (no CDN, no network). Geometry
comes from the browser (getBoundingClientRect of the drawn SVG text), positions of panels from Plotly.js's own
layout (_fullLayout), so what is checked is what is drawn.
"""
from __future__ import annotations

from pathlib import Path

from benchmarks.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: F401 - the one launch recipe of the project

# Returns {"ticks": {axis id: {"count", "font", "problems"}}, "columns": {trace name: {"count", "problems", "l", "r"}},
# "problems": [...], "width", "height"}; columns: the texts scatter traces draw beside their markers (head view).
MEASURE_JS = """() => {
  const gd = document.querySelector('.js-plotly-plot');
  const full = gd._fullLayout;
  const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
  const box = element => { const r = element.getBoundingClientRect();
                           return {l: r.left - svg.left, r: r.right - svg.left, t: r.top - svg.top,
                                   b: r.bottom - svg.top, text: element.textContent}; };
  const overlap = (a, b, slack) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > slack
                                   && Math.min(a.b, b.b) - Math.max(a.t, b.t) > slack;
  const problems = [], ticks = {};
  const shown = element => element.textContent.length && element.getBoundingClientRect().width > 0;
  const tickTexts = [];
  for (const name of Object.keys(full).filter(key => /^[xy]axis\\d*$/.test(key))) {
    const axis = full[name];
    if (!axis.visible || !axis.showticklabels) continue;
    const texts = [...gd.querySelectorAll(`g.${axis._id}tick text`)].filter(shown);
    const boxes = texts.map(box);
    tickTexts.push(...boxes);
    const horizontal = name[0] === 'x';
    const angle = Math.abs(axis.tickangle || 0) % 180;
    boxes.sort((a, b) => horizontal ? (a.l + a.r) - (b.l + b.r) : (a.t + a.b) - (b.t + b.b));
    const font = axis.tickfont.size;
    const own = [];
    for (let i = 1; i < boxes.length; i++) {
      const a = boxes[i - 1], b = boxes[i];
      if (horizontal && angle === 90) {  // written upwards: ticks one font size apart across the text
        const distance = ((b.l + b.r) - (a.l + a.r)) / 2;
        if (distance < font) own.push(`${a.text}|${b.text} ${distance.toFixed(1)} px apart < font ${font}`);
      } else if (overlap(a, b, 0.5)) {
        own.push(`${a.text}|${b.text} overlap`);
      }
    }
    ticks[axis._id] = {count: boxes.length, font, problems: own, angle};
    for (const b of boxes) {
      if (b.l < -0.5 || b.t < -0.5 || b.r > svg.width + 0.5 || b.b > svg.height + 0.5)
        problems.push(`tick ${b.text} of ${axis._id} is cut by the figure's edge`);
    }
  }
  // Text drawn beside markers (the head view's token columns), per trace: its count, and neighbours that touch.
  const columns = {}, columnTexts = [];
  gd.querySelectorAll('g.scatterlayer g.trace').forEach(trace => {
    const boxes = [...trace.querySelectorAll('g.textpoint text')].filter(shown).map(box);
    if (!boxes.length) return;
    boxes.sort((a, b) => (a.t + a.b) - (b.t + b.b));
    const own = [];
    for (let i = 1; i < boxes.length; i++)
      if (overlap(boxes[i - 1], boxes[i], 0.5)) own.push(`${boxes[i - 1].text}|${boxes[i].text} overlap`);
    columns[trace.__data__[0].trace.name] = {count: boxes.length, problems: own,
                                             l: Math.min(...boxes.map(b => b.l)), r: Math.max(...boxes.map(b => b.r))};
    columnTexts.push(...boxes);
    for (const b of boxes) {
      if (b.l < -0.5 || b.t < -0.5 || b.r > svg.width + 0.5 || b.b > svg.height + 0.5)
        problems.push(`label ${b.text} is cut by the figure's edge`);
    }
  });
  // Titles, panel titles, legend and colour bars: none may touch another text or leave the figure.
  const groups = [];
  gd.querySelectorAll('.gtitle').forEach(t => groups.push({name: 'title', boxes: [box(t)]}));
  gd.querySelectorAll('g.annotation').forEach(a => groups.push({name: 'annotation', boxes: [box(a)]}));
  gd.querySelectorAll('g.legend text').forEach(t => groups.push({name: 'legend', boxes: [box(t)]}));
  gd.querySelectorAll('g.colorbar').forEach(bar => {
    const title = bar.querySelector('.cbtitle text');
    const others = [...bar.querySelectorAll('text')].filter(t => t !== title).map(box);
    if (title) {
      const titleBox = box(title);
      for (const o of others) if (overlap(titleBox, o, 0)) problems.push(`colour bar title ${titleBox.text} touches ${o.text}`);
    }
    groups.push({name: 'colour bar', boxes: [...bar.querySelectorAll('text')].map(box), bar: box(bar)});
  });
  const everyText = [...tickTexts.map(b => ({name: 'tick', boxes: [b]})),
                     ...columnTexts.map(b => ({name: 'label', boxes: [b]})), ...groups];
  groups.forEach((group, i) => {
    for (const b of group.boxes) {
      if (b.l < -0.5 || b.t < -0.5 || b.r > svg.width + 0.5 || b.b > svg.height + 0.5)
        problems.push(`${group.name} ${b.text} is cut by the figure's edge`);
      for (const other of everyText) {
        if (other === group) continue;
        for (const o of other.boxes) if (overlap(b, o, 0.5)) problems.push(`${group.name} ${b.text} touches ${other.name} ${o.text}`);
      }
    }
  });
  // A colour bar stays off every panel.
  const panels = Object.values(full._plots).map(plot => ({l: plot.xaxis._offset, r: plot.xaxis._offset + plot.xaxis._length,
                                                           t: plot.yaxis._offset, b: plot.yaxis._offset + plot.yaxis._length}));
  groups.filter(g => g.bar).forEach(g => panels.forEach(p => { if (overlap(g.bar, p, 0.5)) problems.push('a colour bar overlaps a panel'); }));
  return {ticks, columns, problems: [...new Set(problems)], width: svg.width, height: svg.height};
}"""


def figure_html(fig) -> str:
    """The figure as a self-contained page: plotly.js inlined from the installed package, nothing fetched."""
    return fig.to_html(include_plotlyjs=True, full_html=True, config={"displayModeBar": False})


def measure(page, fig, screenshot: Path | None = None) -> dict:
    """Draw `fig` in the playwright `page` and return MEASURE_JS's measurements (optionally a screenshot)."""
    page.set_content(figure_html(fig), wait_until="load", timeout=240_000)  # 256-token grids draw for seconds
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.wait_for_function("() => document.querySelector('.js-plotly-plot')._fullLayout._size !== undefined")
    result = page.evaluate(MEASURE_JS)
    if screenshot is not None:
        page.screenshot(path=str(screenshot), full_page=False)
    return result


def readability_problems(result: dict, token_counts: dict[str, int]) -> list[str]:
    """Everything wrong in `result`: an axis of token_counts (axis id -> tokens) missing labels, neighbouring labels
    colliding, text touching a title or colour bar, text cut at the figure's edge."""
    problems = list(result["problems"])
    for axis, expected in token_counts.items():
        ticks = result["ticks"].get(axis)
        if ticks is None:
            problems.append(f"axis {axis} shows no tick labels; expected {expected}")
            continue
        if ticks["count"] != expected:
            problems.append(f"axis {axis} shows {ticks['count']} tick labels for {expected} tokens")
        problems += [f"axis {axis}: {problem}" for problem in ticks["problems"]]
    return problems
