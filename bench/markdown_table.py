"""The Markdown tables the GPU side-by-side scripts print and write."""
import sys


def cell(x):
    """A TFLOP/s figure, or "–" where nothing was measured."""
    return "–" if x is None else f"{x:.1f}"


def line(row):
    return "| " + " | ".join(row) + " |"


def emit(title, header, rows, out=None, append=False):
    """Prints the table under its title, and writes it to out when given
    (after what out holds, with append)."""
    lines = [title, "", line(header), "|" + " --- |" * len(header)] + [line(r) for r in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    if out:
        with open(out, "a" if append else "w") as f:
            f.write(("\n" if append else "") + table)


def ratio(x, y):
    """x over y to two decimals, or "–" where either is missing."""
    return "–" if x is None or y is None else f"{x / y:.2f}"


def progress(row):
    """Shows a finished row on stderr while the others run."""
    print(line(row), file=sys.stderr, flush=True)
