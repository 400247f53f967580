"""One browser tab's side of the app's websocket protocol, spoken as Streamlit's frontend speaks it: a BackMsg asks
for a rerun with the address bar's query string and the widgets' new values, and the server answers with ForwardMsgs
up to script_finished. Such a client costs little next to the server, so 20 sessions fit on a small machine where 20
browsers would not."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from ui.widgets import OUTPUT_HELP

# The elements that carry figures and tables: token pieces and numbers, never a typed input (measured), and most of
# the bytes. The leak check (checks.verify) reads every other message.
FIGURE_ELEMENTS = ("plotly_chart", "arrow_data_frame")


@dataclass
class SessionLog:
    """One websocket session: the inputs it typed, and the messages it was sent, figures and tables left out."""

    number: int
    inputs: set[str] = field(default_factory=set)
    received: list[bytes] = field(default_factory=list)


@dataclass
class Page:
    """What one run of the script sent that the load test reads."""

    output: str | None = None
    exceptions: list[str] = field(default_factory=list)
    widgets: dict[str, object] = field(default_factory=dict)  # label -> the widget's proto ("Input", "View", ...)

    def read(self, element) -> None:
        kind = element.WhichOneof("type")
        if kind == "exception":
            self.exceptions.append(f"{element.exception.type}: {element.exception.message}")
        elif kind in ("text_input", "button_group"):
            widget = getattr(element, kind)
            self.widgets[widget.label] = widget
        elif kind == "text" and element.text.help == OUTPUT_HELP and self.output is None:
            # ui.widgets.model_output: the sidebar's comes first; a view's later ones (the training view's snapshot,
            # the ablated model) are other models' outputs.
            self.output = element.text.body


class BrokenSession(Exception):
    """The session cannot go on (a run failed, or the page lacks a widget to use): the client opens a new one."""


# What ends one session and not the whole load: the client tallies it as an error and goes on.
SESSION_ERRORS = (BrokenSession, TimeoutError, OSError, WebSocketException)


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def open_websocket(page_url: str, timeout_s: float, cookie: str = ""):
    """A new session of the app served at `page_url`, as an async context manager of its websocket: leaving it ends
    the session, as closing the tab does. cookie: what the page load set, sent back as a browser does."""
    # No Origin header, no XSRF token: a local client without auth cookies needs none of them.
    return connect(page_url.replace("http://", "ws://", 1) + "_stcore/stream", subprotocols=["streamlit"], proxy=None,
                   max_size=2**26, ping_interval=None, open_timeout=timeout_s,
                   additional_headers={"Cookie": cookie} if cookie else {})


class AppSession:
    """One browser tab's side of the protocol: the address bar's query string, and rerun requests."""

    def __init__(self, websocket: ClientConnection, log: SessionLog, query_string: str, timeout_s: float):
        self.websocket = websocket
        self.log = log
        self.query_string = query_string
        self.timeout_s = timeout_s

    async def rerun(self, widgets: list[WidgetState]) -> Page:
        """Ask for a rerun with these widget values (the others keep theirs) and read its messages up to
        script_finished. Raises TimeoutError after timeout_s."""
        request = BackMsg()
        request.rerun_script.query_string = self.query_string
        request.rerun_script.widget_states.widgets.extend(widgets)
        await self.websocket.send(request.SerializeToString())
        try:
            return await asyncio.wait_for(self._read_run(), self.timeout_s)
        except TimeoutError:
            raise TimeoutError(f"the run did not finish within {self.timeout_s:g} s") from None

    async def _read_run(self) -> Page:
        page = Page()
        while True:  # ends at script_finished, or at rerun()'s timeout
            data = await self.websocket.recv()
            message = ForwardMsg.FromString(data)
            kind = message.WhichOneof("type")
            element = message.delta.new_element if kind == "delta" and message.delta.HasField("new_element") else None
            if element is None or element.WhichOneof("type") not in FIGURE_ELEMENTS:
                self.log.received.append(data)
            if element is not None:
                page.read(element)
            elif kind == "page_info_changed":  # the app rewrote its link: the browser's next request carries it
                self.query_string = message.page_info_changed.query_string
            elif kind == "script_finished":
                status = message.script_finished
                if status != ForwardMsg.FINISHED_SUCCESSFULLY:
                    page.exceptions.append(f"the run ended with {ForwardMsg.ScriptFinishedStatus.Name(status)}")
                return page
