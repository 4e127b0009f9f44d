"""Tables for people: the plain text a repr prints and the HTML a notebook shows."""
from __future__ import annotations

import html


def text_table(headers: list, rows: list, title: str = "") -> str:
    """Columns padded to their widest cell, under an optional title line."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(str(h))] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    lines = [title] if title else []
    for row in [list(map(str, headers))] + cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def html_table(headers: list, rows: list, title: str = "") -> str:
    """The same table as HTML, every cell escaped (op and value names come from user files)."""
    def cells(tag: str, row) -> str:
        return "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in row)

    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table>{caption}<thead><tr>{cells('th', headers)}</tr></thead><tbody>{body}</tbody></table>"
