"""The Markdown tables the GPU side-by-side scripts print and write."""
import sys


def cell(x):
    """A TFLOP/s figure, or "–" where nothing was measured."""
    return "–" if x is None else f"{x:.1f}"


def line(row):
    return "| " + " | ".join(row) + " |"


def emit(title, header, rows, out=None):
    """Prints the table under its title, and writes it to out when given."""
    lines = [title, "", line(header), "|" + " --- |" * len(header)] + [line(r) for r in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    if out:
        with open(out, "w") as f:
            f.write(table)


def progress(row):
    """Shows a finished row on stderr while the others run."""
    print(line(row), file=sys.stderr, flush=True)
