"""An annotator page as a plain HTTP client reads it (no JavaScript, as a browser without it).

The HIT page's form (``#hit-form``): its action, its hidden fields, and for each position
``n`` the radio options ``o{n}`` with their words in screen order and the "None of the
above" option last. A ratings study's step page (``#rating-form``, one step of one pair):
its action, its hidden fields (the assignment, the pair's position, the step: quality or
consistency) and the scale's points in screen order, as the radios ``rating`` post them.
A message page's kind (``data-kind``: cap_reached, no_work, ...); the heading and any
error, for messages and refusals. Only what the page shows: nothing of an item's kind, its
model ranks or probabilities is there to read (docs/design.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import httpx

from app.simulate.godview import SimulationError

HIT_PAGE = "hit"
RATING_PAGE = "rating"


@dataclass
class Page:
    """What a plain HTTP client reads from an annotator page."""

    status: int
    kind: str = ""  # "hit", "rating", or the message page's kind (cap_reached, no_work, ...)
    action: str | None = None  # the HIT (or rating) form's action
    fields: dict[str, str] = field(default_factory=dict)  # its hidden fields, ms* aside
    options: dict[int, dict[int, str]] = field(default_factory=dict)  # position: value: word
    none: dict[int, int] = field(default_factory=dict)  # position: the "none" option's value
    points: list[str] = field(default_factory=list)  # a rating step: the scale, as posted
    text: str = ""  # the page's heading and its error, for messages

    @property
    def step(self) -> str:
        """A rating page's step: "quality" or "consistency" (its form's ``step``)."""
        return self.fields.get("step", "")

    @property
    def position(self) -> int:
        """A rating page's pair: its position in the HIT (its form's ``position``)."""
        text = self.fields.get("position", "")
        if not text.isdigit():
            raise SimulationError(f"the rating page names no position: {text!r}")
        return int(text)

    def point(self, value: float) -> str:
        """A rating step's scale point for `value`, as the page posts it."""
        for text in self.points:
            if float(text) == value:
                return text
        raise SimulationError(f"the page's scale ({', '.join(self.points)}) has no point {value:g}")

    def shown(self, position: int) -> list[str]:
        """The position's words in screen order (option values 0..k-1)."""
        words = self.options.get(position, {})
        if sorted(words) != list(range(len(words))) or self.none.get(position) != len(words):
            raise SimulationError(f"position {position} of the page has odd options: {words}")
        return [words[v] for v in range(len(words))]


class _Reader(HTMLParser):
    def __init__(self, page: Page) -> None:
        super().__init__(convert_charrefs=True)
        self.page = page
        self.in_form = False
        self.none_label = False
        self.radio: tuple[int, int] | None = None
        self.capture: list[str] | None = None
        self.capture_tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "section" and "message" in classes:
            self.page.kind = a.get("data-kind", "")
        elif tag == "form" and a.get("id") == "hit-form":
            self.in_form, self.page.kind, self.page.action = True, HIT_PAGE, a.get("action")
        elif tag == "form" and a.get("id") == "rating-form":
            self.in_form, self.page.kind, self.page.action = True, RATING_PAGE, a.get("action")
        elif tag == "label":
            self.none_label = "none" in classes
        elif tag == "input" and self.in_form:
            name = a.get("name", "")
            if a.get("type") == "hidden" and not name.startswith("ms"):
                self.page.fields[name] = a.get("value", "")
            elif a.get("type") == "radio" and name == "rating":
                self.page.points.append(a.get("value", ""))
            elif a.get("type") == "radio" and name[:1] == "o" and name[1:].isdigit():
                self.radio = (int(name[1:]), int(a.get("value", "-1")))
                if self.none_label:
                    self.page.none[self.radio[0]] = self.radio[1]
        elif (tag == "span" and "word" in classes and self.radio and not self.none_label) or (
            tag == "h1" or (tag == "p" and "error" in classes)
        ):
            self.capture, self.capture_tag = [], tag

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.in_form = False
        if self.capture is None or tag != self.capture_tag:
            return
        text = "".join(self.capture).strip()
        if tag == "span" and self.radio is not None:
            position, value = self.radio
            self.page.options.setdefault(position, {})[value] = text
        else:
            self.page.text = f"{self.page.text} {text}".strip()
        self.capture = None

    def handle_data(self, data: str) -> None:
        if self.capture is not None:
            self.capture.append(data)


def read_page(response: httpx.Response) -> Page:
    page = Page(response.status_code)
    _Reader(page).feed(response.text)
    return page
