"""A small HTML tree for page tests (stdlib only): find elements by tag and
attributes, read their text and attributes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def iter(self) -> Iterator[Node]:
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str | bool) -> list[Node]:
        """Elements with this tag whose attributes match (``True``: present;
        a leading underscore is dropped, so ``class_=`` means ``class``)."""
        want = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            ok = True
            for k, v in want.items():
                if v is True:
                    ok = ok and k in n.attrs
                elif k == "class":
                    ok = ok and str(v) in n.attrs.get("class", "").split()
                else:
                    ok = ok and n.attrs.get(k) == v
            if ok:
                out.append(n)
        return out

    def find(self, tag: str | None = None, **attrs: str | bool) -> Node:
        found = self.find_all(tag, **attrs)
        if not found:
            raise AssertionError(f"no <{tag}> with {attrs}")
        return found[0]

    def text(self) -> str:
        parts: list[str] = []
        for c in self.children:
            parts.append(c if isinstance(c, str) else c.text())
        return " ".join(" ".join(parts).split())

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.attrs.get(name, default)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: (v or "") for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root
