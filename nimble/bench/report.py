"""Tables of benchmark rows."""

from __future__ import annotations



def print_table(rows: list[dict], columns: list[tuple[str, str]], out=None) -> None:
    """One line per row, one right-aligned column per (key, format); a key a row lacks
    shows as '-'."""
    cells = [[name for name, _ in columns]]
    for row in rows:
        cells.append([fmt.format(row[name]) if name in row else "-" for name, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for n, r in enumerate(cells):
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)), file=out)
        if n == 0:
            print("-+-".join("-" * w for w in widths), file=out)
