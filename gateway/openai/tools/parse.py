"""Generated text back into tool calls, incrementally: one parser serves streaming (fed each
delta) and whole responses (fed the full text), so both give the same calls and content.

Tagged formats (hermes, generic): text outside `<tool_call>...</tool_call>` is content, streamed
as it comes except a tail that could be the start of the tag; a block whose JSON is a call of a
known tool becomes a call, anything else stays content verbatim. An unterminated block at the
end (EOS right after the JSON) still counts if it parses. llama3_json: an answer whose first
non-blank character is `{` is held to the end and must be entirely calls joined by ";", else
it is content. Blank text around calls is dropped. Without `parallel_tool_calls` only the first
call is kept. When a grammar forces the calls (`forced`), everything generated is call syntax:
an unfinished call cut off by `max_tokens` after complete ones is dropped, not made content.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from gateway.openai.tools.formats import ToolFormat

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def openai_dict(self) -> dict[str, object]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}  # fmt: skip


Event = str | ToolCall


class ToolParser:
    def __init__(self, fmt: ToolFormat, names: frozenset[str], parallel: bool = True,
                 forced: bool = False) -> None:
        self.fmt = fmt
        self.names = names
        self.parallel = parallel
        self.forced = forced
        self.calls: list[ToolCall] = []
        self._buf = ""
        self._inside = False  # within a tag (tagged) or a held JSON answer (llama3_json)
        self._blank = ""  # blank text held until something visible follows it

    def feed(self, text: str) -> list[Event]:
        self._buf += text
        return self._scan_tagged() if self.fmt.open else self._scan_bare()

    def finish(self) -> list[Event]:
        events = self._scan_tagged() if self.fmt.open else self._scan_bare()
        rest, self._buf = self._buf, ""
        if self._inside and self.fmt.open:
            call = self._call(rest)
            events += self._emit(call) if call else self._tail(self.fmt.open + rest)
        elif self._inside:
            calls = self._bare_calls(rest)
            events += ([e for c in calls for e in self._emit(c)] if calls is not None
                       else self._tail(rest))
        else:
            events += self._tail(rest)
        if not self.calls and self._blank:
            events.append(self._blank)
        self._inside, self._blank = False, ""
        return events

    # ---- tagged: <tool_call> blocks ----------------------------------------------------------

    def _scan_tagged(self) -> list[Event]:
        open_, close = self.fmt.open or "", self.fmt.close or ""
        events: list[Event] = []
        while True:
            if not self._inside:
                at = self._buf.find(open_)
                if at < 0:
                    keep = _partial_suffix(self._buf, open_)
                    events += self._text(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                    return events
                events += self._text(self._buf[:at])
                self._buf, self._inside = self._buf[at + len(open_) :], True
            at = self._buf.find(close)
            if at < 0:
                return events
            block, self._buf, self._inside = self._buf[:at], self._buf[at + len(close) :], False
            call = self._call(block)
            events += self._emit(call) if call else self._text(open_ + block + close)

    def _call(self, block: str) -> ToolCall | None:
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            return None
        return self._accept(obj)

    # ---- bare JSON (llama3_json) -------------------------------------------------------------

    def _scan_bare(self) -> list[Event]:
        if self._inside:
            return []
        visible = self._buf.lstrip()
        if not visible:
            return []
        if visible.startswith("{"):
            self._inside = True  # held to the end: calls, or content after all
            return []
        text, self._buf = self._buf, ""
        return self._text(text)

    def _bare_calls(self, text: str) -> list[ToolCall] | None:
        objs, at = [], 0
        while True:
            try:
                obj, at = _DECODER.raw_decode(text, len(text) - len(text[at:].lstrip()))
            except json.JSONDecodeError:
                return None
            objs.append(obj)
            rest = text[at:].lstrip()
            if not rest:
                break
            if not rest.startswith(";"):
                return None
            at = len(text) - len(rest) + 1
        calls = [self._accept(obj) for obj in objs]
        return None if any(c is None for c in calls) else [c for c in calls if c is not None]

    # ---- shared ------------------------------------------------------------------------------

    def _accept(self, obj: object) -> ToolCall | None:
        """`obj` as a call, if it is one of a known tool."""
        if not isinstance(obj, dict) or obj.get("name") not in self.names:
            return None
        args = obj.get(self.fmt.args_key, obj.get("arguments", obj.get("parameters")))
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        if not isinstance(args, dict):
            return None
        return ToolCall(str(obj["name"]), json.dumps(args, ensure_ascii=False))

    def _emit(self, call: ToolCall) -> list[Event]:
        if self.calls and not self.parallel:
            return []  # one call only: later ones are dropped
        self.calls.append(call)
        self._blank = ""
        return [call]

    def _tail(self, text: str) -> list[Event]:
        """What is left unparsed at the end: content, unless it is a forced call cut short."""
        if self.forced and self.calls:
            return []
        return self._text(text)

    def _text(self, text: str) -> list[Event]:
        # A blank tail is held (dropped if a call follows), so content does not depend on how
        # the text was split into deltas.
        visible = text.rstrip()
        if not visible:
            self._blank += text
            return []
        out, self._blank = self._blank + visible, text[len(visible) :]
        return [out]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
