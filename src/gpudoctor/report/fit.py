"""Tables that fit the terminal: the table when it fits, else the same rows stacked.

A rich table narrower than its content crops cells (``bus…``, ``reduce_scatt…``) or whole
columns. :class:`Fit` measures the table at render time, against the width it is given
(``COLUMNS``, the terminal, or a console's ``width``): when the table's minimum width fits, the
table is printed (its wrapping columns wrap at spaces); otherwise each row is printed as a block,
its first column as a heading and every other cell as ``header value``, packed into lines of the
available width. No number, name or rank is ever cut.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

SEP = " · "
_UNBOUNDED = 10_000
INDENT = 4


def _cell_text(console: Console, cell: object) -> Text:
    if isinstance(cell, Text):
        text = cell.copy()
    elif isinstance(cell, str):
        text = console.render_str(cell, highlight=False)
    else:
        text = Text(str(cell))
    # a multi-line cell (a figure and its share under it) reads as one phrase
    return Text(" ").join(line for line in text.split("\n") if line.plain.strip()) if "\n" in text.plain else text


class Fit:
    """Render ``table`` as is when it fits, else stacked (see the module docstring).

    ``heading_columns``: how many leading columns form each row's heading (default: the leading
    columns with an empty header, plus the first named one).
    """

    def __init__(self, table: Table, *, heading_columns: int | None = None) -> None:
        self.table = table
        self.heading_columns = heading_columns

    def fits(self, console: Console, options: ConsoleOptions) -> bool:
        """True when rich would give every column at least its minimum (its longest word, its
        widest no-wrap cell) at this width: then nothing is cropped."""
        width, table = options.max_width, self.table
        if self._minimum(console, options) > width:
            return False
        try:  # rich's own widths (it can crop a column below its minimum: ratio columns, collapsing)
            given = table._calculate_column_widths(console, options.update_width(width - table._extra_width))
            unbounded = options.update_width(_UNBOUNDED)
            needed = [table._measure_column(console, unbounded, column).minimum for column in table.columns]
        except AttributeError:  # rich's internals moved: the minimum-width test alone
            return True
        return all(g >= n for g, n in zip(given, needed, strict=True))

    def _minimum(self, console: Console, options: ConsoleOptions) -> int:
        return Measurement.get(console, options.update_width(_UNBOUNDED), self.table).minimum

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.fits(console, options):
            yield self.table
            return
        yield from self.stacked(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # never wider than it is given: the stacked form takes any width
        found = Measurement.get(console, options.update_width(_UNBOUNDED), self.table)
        return Measurement(min(found.minimum, options.max_width), min(found.maximum, options.max_width))

    def _heads(self) -> int:
        if self.heading_columns is not None:
            return self.heading_columns
        n = 0
        for column in self.table.columns:
            n += 1
            if str(column.header).strip():
                break
        return n

    def stacked(self, console: Console, width: int) -> RenderResult:
        table = self.table
        if table.title:
            title = table.title if isinstance(table.title, Text) else console.render_str(str(table.title))
            title.stylize(table.title_style or "")
            yield title
        heads = self._heads()
        columns = [(str(c.header), [_cell_text(console, cell) for cell in c.cells]) for c in table.columns]
        for r, row in enumerate(table.rows):
            heading = Text(" ").join(cells[r] for _, cells in columns[:heads] if cells[r].plain.strip())
            heading.pad_left(1)
            if row.style:
                heading.stylize(row.style)
            yield heading
            fields = []
            for header, cells in columns[heads:]:
                value = cells[r]
                if not value.plain.strip():
                    continue
                field = Text(f"{header} " if header else "", style="dim")
                field.append_text(value)
                fields.append(field)
            yield from _pack(fields, width)
        yield Text("")  # as a table ends with a blank line


def _pack(fields: list[Text], width: int) -> list[Text]:
    """Fields joined by :data:`SEP` into lines of at most ``width`` (indented); a field longer
    than a line gets a line of its own and wraps at its spaces."""
    lines: list[Text] = []
    line = Text(" " * INDENT)
    for field in fields:
        if line.plain.strip() and line.cell_len + len(SEP) + field.cell_len > width:
            lines.append(line)
            line = Text(" " * INDENT)
        if line.plain.strip():
            line.append(SEP, style="dim")
        line.append_text(field)
    if line.plain.strip():
        lines.append(line)
    return lines


class Verbatim(Text):
    """Text that must copy whole: a command, code, a URL. Printed through :func:`print_whole` it
    is neither wrapped nor cropped (a line longer than the terminal runs on and the terminal folds
    it, so selecting it copies the line unbroken); anywhere else it renders as any Text."""


def print_whole(console: Console, renderable: object, **print_options: object) -> None:
    """Print ``renderable`` (a :class:`rich.console.Group` is printed part by part, as it would
    render) with its :class:`Verbatim` parts unwrapped and uncropped; ``print_options`` go to
    every ``console.print``."""
    from rich.console import Group

    if isinstance(renderable, Group):
        for part in renderable.renderables:
            print_whole(console, part, **print_options)
    elif isinstance(renderable, Verbatim):
        console.print(renderable, soft_wrap=True, **print_options)
    else:
        console.print(renderable, **print_options)
