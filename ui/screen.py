"""The space figures are drawn in: the page's content width and the window's height, as the browser measures them.

A figure lays itself out for the width it is given (viz.Theme.width): a laptop with the sidebar open, a projector,
lecture mode with the sidebar folded all differ. A small component in the page measures the main column (as if no
scrollbar took its share: one appearing must not make every figure narrower and the page shorter again) and the
window's height, and reports them, once the page has finished its run, when they change by more than a few pixels;
the page is then drawn again for the new space. Until it has reported (the first run of a session, or a test without
a browser), DEFAULT_PX stands in.
"""
from __future__ import annotations

import streamlit as st

# (width, height) before the browser has measured: the content column at 1400 x 900 with the sidebar open, and in
# lecture mode at 1280 x 720 (sidebar folded, 22 px text, 1.5 rem of padding each side).
DEFAULT_PX = {False: (940, 900), True: (1214, 720)}
SCROLLBAR_PX = 16  # kept free for the page's own scrollbar
# Lecture mode gives a figure the projector's height: the input, the output and the controls stand in a column
# beside it (ui.frame), the figure in the other, STAGE of the width; it starts within LECTURE_TOP_PX (at FIGURE_TOP_PX
# where nothing stands above it in its column: the height it is given starts there).
STAGE = 0.74
COLUMN_GAP_PX = 22  # st.columns' small gap, 1 rem of lecture mode's 22 px
LECTURE_TOP_PX = 24
FIGURE_TOP_PX = 4  # measured in Chromium at 1280 x 720: 2 px
SIDE_TOP_PX = 44  # lecture mode: Streamlit's header (the sidebar's » and the menu), a strip over the side column only

PROBE_JS = """
export default function(component) {
  const { setStateValue, data } = component;
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  if (!main) return;
  let timer;
  const measure = () => {
    // Reported once the page has finished its run: a report reruns the script, and would stop a slow first run.
    if (document.querySelector('[data-testid="stStatusWidget"]')) {
      clearTimeout(timer);
      timer = setTimeout(measure, 250);
      return;
    }
    const style = getComputedStyle(main);
    const scroller = main.closest('[data-testid="stMain"]') || main.parentElement;
    const bar = scroller.offsetWidth - scroller.clientWidth;
    const width = Math.floor(main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) + bar);
    const height = window.innerHeight;
    main.dataset.measuredWidth = width;
    if (Math.abs(width - data.width) >= 8 || Math.abs(height - data.height) >= 8) {
      setStateValue('screen', {width, height});
    }
  };
  const observer = new ResizeObserver(() => { clearTimeout(timer); timer = setTimeout(measure, 100); });
  observer.observe(main);
  window.addEventListener('resize', measure);
  measure();
  return () => { observer.disconnect(); window.removeEventListener('resize', measure); clearTimeout(timer); };
}
"""
_probe = st.components.v2.component("atlas_screen_probe", js=PROBE_JS)
PROBE_CSS = "<style>.st-key-screen-probe { display: none; }</style>"  # measures, takes no room


def measured(lecture: bool) -> tuple[int, int]:
    """(content width, window height) in pixels: the browser's last report, or DEFAULT_PX. Mounts the probe."""
    reported = (st.session_state.get("screen-probe") or {}).get("screen") or {}
    width, height = DEFAULT_PX[lecture]
    if reported:
        width, height = int(reported["width"]), int(reported["height"])
    st.html(PROBE_CSS)
    _probe(key="screen-probe", data={"width": width, "height": height}, on_screen_change=lambda: None, height=0)
    return width, height


def figure_space(lecture: bool) -> tuple[int, int | None]:
    """(width, height) a figure may take: the content width less the scrollbar's; in lecture mode the figures'
    column and the window's height below where the figure starts (elsewhere the page scrolls: no height limit)."""
    width, height = measured(lecture)
    if not lecture:
        return width - SCROLLBAR_PX, None
    return int((width - COLUMN_GAP_PX) * STAGE) - SCROLLBAR_PX, height - FIGURE_TOP_PX - 8
