"""A Triton row gather that GPU threads run directly against a table in pinned host memory.

PyTorch-Direct (Min et al., section 4.5): GPU reads of host memory go over PCIe as requests of
the 128-byte lines a warp touches, so a warp's 32 lanes of 4-byte elements should cover exactly
one aligned line. When a row is not a multiple of 128 bytes, most rows start in the middle of a
line and every warp of a plain row-major gather straddles two lines. The *circular shift* fixes
that: with the row starting ``m`` elements into its line, position ``p`` of the row's tile reads
column

    c = (p - m) mod W

so positions ``[32k, 32k + 32)`` read one aligned line (columns ``32k - m ... 32k + 31 - m``),
and the ``m`` positions that would fall before the row's start wrap around to its last ``m``
columns. The output is written at the same column ``c``, so the result is the plain gather; only
the order in which lanes read changes. The shift is applied only to rows wider than one line
whose width is not a multiple of 128 bytes; otherwise every row starts where a line starts (for
a 128-byte-aligned table) and ``m`` is 0.

Shapes: ``table`` ``[num_rows, W]`` float32 (pinned host memory or GPU memory), ``index``
``[n]`` int64 on the GPU, output ``[n, W]`` float32 on the GPU.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton ships with the Linux torch wheels; elsewhere the staged path is used
    triton = None

LINE_BYTES = 128  # a GPU cache line: the unit of a PCIe read request from a warp
ELEMENT_BYTES = 4  # float32
LINE = LINE_BYTES // ELEMENT_BYTES  # elements per line
TILE = 4096  # elements a program copies (rows x columns of its tile)


def available() -> bool:
    """Whether Triton can be imported here."""
    return triton is not None


def needs_shift(width: int) -> bool:
    """Whether rows of ``width`` float32 elements get the circular shift: wider than one line and
    not a whole number of lines."""
    row_bytes = width * ELEMENT_BYTES
    return row_bytes > LINE_BYTES and row_bytes % LINE_BYTES != 0


def lead_elements(table: torch.Tensor) -> int:
    """How many elements into its 128-byte line the table's first element sits."""
    return (table.data_ptr() % LINE_BYTES) // ELEMENT_BYTES


def tile_shape(width: int) -> tuple[int, int]:
    """(rows, columns) of one program's tile: columns a power of two of at least one line (so a
    warp's 32 lanes cover one line of a row) and at most 1,024; rows fill ``TILE`` elements."""
    columns = min(max(triton.next_power_of_2(width), LINE), 1024)
    return max(TILE // columns, 1), columns


if triton is not None:

    @triton.jit
    def source_columns(src, positions, width, lead, SHIFT: tl.constexpr, LINE: tl.constexpr):
        """The column each position of each row's tile reads: ``[rows, columns]`` for ``src``
        ``[rows]`` (int64 row ids) and ``positions`` ``[columns]``; without SHIFT the positions
        themselves, ``[1, columns]``, the same for every row."""
        if SHIFT:
            offset = (lead + src * width) % LINE  # < LINE < width; non-negative, so no sign convention
            columns = positions[None, :] - offset[:, None]
            columns = tl.where(columns < 0, columns + width, columns)
        else:
            columns = positions[None, :]
        return columns

    @triton.jit
    def _gather_rows(
        table,
        index,
        out,
        count,
        width,
        lead,
        SHIFT: tl.constexpr,
        LINE: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_COLUMNS: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        positions = tl.program_id(1) * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)
        wanted = rows < count
        src = tl.load(index + rows, mask=wanted, other=0)
        columns = source_columns(src, positions, width, lead, SHIFT, LINE)
        mask = wanted[:, None] & (positions < width)[None, :]
        values = tl.load(table + src[:, None] * width + columns, mask=mask)
        tl.store(out + rows.to(tl.int64)[:, None] * width + columns, values, mask=mask)


def gather_rows(table: torch.Tensor, index: torch.Tensor, out: torch.Tensor, *, align: bool = True) -> torch.Tensor:
    """``out[i] = table[index[i]]`` run by the device's threads (or by Triton's interpreter when
    ``TRITON_INTERPRET=1`` was set before this module was imported). The caller checks ``index``
    (in range, int64, contiguous, on ``out``'s device) and makes ``out`` ``[len(index), W]``.

    Args:
        table: ``[num_rows, W]`` contiguous float32 that the device can address (GPU memory, or
            host memory registered with CUDA).
        index: ``[n]`` int64 row ids, ``n >= 1``.
        out: ``[n, W]`` contiguous float32.
        align: apply the circular shift where :func:`needs_shift` says so (``False`` is the
            naive gather, for comparison).
    """
    width = table.shape[1]
    block_rows, block_columns = tile_shape(width)
    grid = (triton.cdiv(index.shape[0], block_rows), triton.cdiv(width, block_columns))
    _gather_rows[grid](
        table,
        index,
        out,
        index.shape[0],
        width,
        lead_elements(table),
        SHIFT=align and needs_shift(width),
        LINE=LINE,
        BLOCK_ROWS=block_rows,
        BLOCK_COLUMNS=block_columns,
    )
    return out
