"""A reasoning model's thinking (Qwen3's, DeepSeek-R1's...), told apart from its answer. Pure: no llama.cpp.

    markers = ThinkingMarkers("<think>", "</think>")
    markers.split("<think>Hm.</think>\\n\\nParis.", state="optional")   # ("Hm.", "Paris.")
    ReasoningSplitter(markers, state="optional").feed("<thi")          # []: held back, it may be the marker

docs/models.md ("Thinking") says where the thinking goes in each kind of answer.
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
    #: Headers that open the answer (gpt-oss's ``<|channel|>final<|message|>``), removed from it; longest
    #: first.
    answer_headers: tuple[str, ...] = ()
    #: What must follow the end marker in a constrained answer (a new message's header); "" for spacing.
    resume: str = ""
    #: What a constrained answer that is not a tool call starts with (its channel's header).
    answer_prefix: str = ""
    #: Whether the model always thinks when its thinking is on (Qwen3 opens ``<think>`` every time): a
    #: constrained answer then requires the thinking, as the model was trained to write it.
    always: bool = False

    @property
    def closing_text(self) -> str:
        return self.close or f"\n{self.end}\n\n"

    def prompt_state(self, prompt: str) -> ThinkingState:
        """Whether the rendered prompt leaves the model inside its thinking, past it, or before it."""
        tail = prompt.rstrip()
        if tail.endswith(self.start.rstrip()):
            return "open"
        if tail.endswith(self.end.rstrip()):
            return "closed"
        return "optional"

    def answer(self, text: str) -> str:
        """The answer without the header that opens it ("" for a text cut short inside a header, as a
        stream holds that back)."""
        text = text.lstrip()
        if any(h.startswith(text) for h in self.answer_headers):
            return ""
        header = next((h for h in self.answer_headers if text.startswith(h)), "")
        return text[len(header) :].lstrip() if header else text

    def split(self, text: str, *, state: ThinkingState) -> tuple[str | None, str]:
        """The thinking (None when there was none) and the answer of a whole generated text."""
        body = self._body(text, state)
        if body is None:
            return None, self.answer(text) if self.answer_headers else text
        reasoning, found, answer = body.partition(self.end)
        if not found:
            return reasoning.strip(), ""
        return reasoning.strip(), self.answer(answer)

    def splits(self, state: ThinkingState) -> bool:
        """Whether an answer from this state has anything to take apart (thinking, or a header)."""
        return state != "closed" or bool(self.answer_headers)

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
        closed = "header" if markers.answer_headers else "answer"
        self._phase = {"open": "thinking", "optional": "before", "closed": closed}[state]
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
        if self._phase == "thinking":
            piece: tuple[PieceKind, str] = ("reasoning", held)
        elif self._phase == "answer" or not self.markers.answer_headers:
            piece = ("content", held)
        else:  # cut short before the answer's header ended: what the whole text's answer keeps of it
            piece = ("content", self.markers.answer(held))
        return [piece] if piece[1] else []

    def _step(self, out: list[tuple[PieceKind, str]]) -> None:
        markers, held = self.markers, self._held
        if self._phase == "before":
            stripped = held.lstrip()
            if stripped.startswith(markers.start):
                self._held, self._phase = stripped[len(markers.start) :].lstrip(), "thinking"
            elif not markers.start.startswith(stripped):
                self._phase = "header" if markers.answer_headers else "answer"
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
            stripped = held.lstrip()
            if not any(h.startswith(stripped) and h != stripped for h in markers.answer_headers):
                # No header can still be forming: the answer starts, without the header it opened with.
                self._held, self._phase = markers.answer(stripped), "answer"
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
