"""A reasoning model's thinking, told apart from its answer.

Models such as Qwen3 and DeepSeek-R1 write their thinking first, between two markers, then the answer::

    markers = ThinkingMarkers("<think>", "</think>")
    markers.prompt_state(prompt)        # "open": the template opened the thinking; "closed"; "optional"
    markers.split("<think>Hm.</think>\\n\\nParis.", state="optional")   # ("Hm.", "Paris.")

    splitter = ReasoningSplitter(markers, state="optional")
    splitter.feed("<thi")               # []: held back, it may be the opening marker
    splitter.feed("nk>Hm")              # [("reasoning", "Hm")]

The thinking goes to ``reasoning_content`` (chat), ``delta.reasoning_content`` (streamed chat) and a
``reasoning`` item (Responses API); the answer to ``content``. Pure: no llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Where generation starts: inside the thinking (the template opened it), after it (the template wrote
#: it closed, as Qwen3's template does when thinking is off), or before it (the model may open it).
ThinkingState = Literal["open", "closed", "optional"]
PieceKind = Literal["reasoning", "content"]


@dataclass(frozen=True)
class ThinkingMarkers:
    """The text that opens and closes a model's thinking, and what the engine writes to close it when the
    thinking budget runs out (``close``: the end marker with the spacing the model writes around it)."""

    start: str
    end: str
    close: str = ""
    #: Text that follows the end marker before the answer (a channel header), removed from the answer.
    answer_header: str = ""

    @property
    def closing_text(self) -> str:
        return self.close or f"\n{self.end}\n\n"

    def prompt_state(self, prompt: str) -> ThinkingState:
        """Whether the rendered prompt leaves the model inside its thinking, past it, or before it."""
        tail = prompt.rstrip()
        if tail.endswith(self.start.rstrip()):
            return "open"
        if tail.endswith(self.end.rstrip()) or tail.endswith((self.end + self.answer_header).rstrip()):
            return "closed"
        return "optional"

    def split(self, text: str, *, state: ThinkingState) -> tuple[str | None, str]:
        """The thinking (None when there was none) and the answer of a whole generated text."""
        body = self._body(text, state)
        if body is None:
            return None, text
        reasoning, found, answer = body.partition(self.end)
        if not found:
            return reasoning.strip(), ""
        answer = answer.lstrip()
        if self.answer_header and answer.startswith(self.answer_header):
            answer = answer[len(self.answer_header) :]
        return reasoning.strip(), answer.lstrip()

    def _body(self, text: str, state: ThinkingState) -> str | None:
        if state == "open":
            return text
        if state == "optional" and text.lstrip().startswith(self.start):
            return text.lstrip()[len(self.start) :]
        return None


class ReasoningSplitter:
    """Splits streamed text into thinking and answer pieces, holding back only what may be a marker."""

    def __init__(self, markers: ThinkingMarkers, *, state: ThinkingState) -> None:
        self.markers = markers
        # "before": the model may open its thinking; "thinking"; "header": past the end marker, before
        # the answer header; "answer".
        self._phase = {"open": "thinking", "optional": "before", "closed": "answer"}[state]
        self._held = ""

    def feed(self, text: str) -> list[tuple[PieceKind, str]]:
        """The pieces ``text`` completes, in order; text that may still become a marker is held back."""
        self._held += text
        out: list[tuple[PieceKind, str]] = []
        while True:
            before = self._held, self._phase
            self._step(out)
            if (self._held, self._phase) == before:
                return [piece for piece in out if piece[1]]

    def flush(self) -> list[tuple[PieceKind, str]]:
        """What is still held back, at the end of the text."""
        held, self._held = self._held, ""
        kind: PieceKind = "reasoning" if self._phase == "thinking" else "content"
        return [(kind, held)] if held and self._phase != "header" else []

    def _step(self, out: list[tuple[PieceKind, str]]) -> None:
        markers, held = self.markers, self._held
        if self._phase == "before":
            stripped = held.lstrip()
            if stripped.startswith(markers.start):
                self._held, self._phase = stripped[len(markers.start) :].lstrip(), "thinking"
            elif not markers.start.startswith(stripped):
                self._phase = "answer"
        elif self._phase == "thinking":
            found = held.find(markers.end)
            if found >= 0:
                out.append(("reasoning", held[:found]))
                self._held, self._phase = held[found + len(markers.end) :].lstrip(), "header"
            else:
                keep = held_length(held, markers.end)
                out.append(("reasoning", held[: len(held) - keep]))
                self._held = held[len(held) - keep :]
        elif self._phase == "header":
            header = markers.answer_header
            stripped = held.lstrip()
            if header and stripped.startswith(header):
                self._held, self._phase = stripped[len(header) :].lstrip(), "answer"
            elif not header or not header.startswith(stripped):
                self._held, self._phase = stripped, "answer"
        elif held:
            out.append(("content", held))
            self._held = ""


def held_length(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (it may still become the marker, so
    a stream holds it back)."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
