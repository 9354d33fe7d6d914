"""Hand-vectorised kernels for the exact solver, written as LLVM IR through numba intrinsics.

Why not plain numba loops: numba's LLVM vectorises elementwise loops but not a running
minimum (``low = x if x < low else low``), even under ``fastmath``, so pricing a row of
reduced costs ran one comparison at a time; four interleaved scalar minima were the best
plain loop. :func:`row_min` keeps ``LANES x VECTORS`` minima in vector registers instead:
over twice as fast as those on DD's 243-column rows (``docs/performance.md``).
On short rows (NCI1's 18 columns) its four registers and scalar tail cost more than they
save.

:func:`padded_row_min` is the minimum for those short rows, padded by the solver to whole
vector registers (NCI1's 18 columns read as 20): one register, no tail, inlined into the
solver's loops instead of a called scalar loop. :func:`padded_first_at` then finds the
column that attains it without a data-dependent branch. They make pricing every row each
pivot (Dantzig's rule) cheaper than block pricing on small problems such as NCI1's
(:data:`mwsp_torch.transport._simplex.FULL_PRICING_MAX_ARCS`).

:func:`popcount` and :func:`lowest_bit` are LLVM's bit counts, for the solver's ancestor
masks: numba has no intrinsic for them, and a SWAR count takes about a dozen instructions.

Results are exact: every step is an IEEE subtraction or an ordered ``<`` comparison, so
the minimum is bit for bit one of the differences ``row[q] - offset[q]``, as the solver's
scan for the entering column requires.

Developers: numba caches each caller by its own file, so after editing this module also
delete the ``*.nbi``/``*.nbc`` files under ``mwsp_torch/__pycache__`` (the solver's cached
code would otherwise keep the old kernel).
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

#: Doubles in one vector register (256-bit AVX2, which every x86-64 CPU of the last decade has;
#: LLVM splits or narrows the vectors on other targets, so the result is the same anywhere).
LANES = 4

#: Independent vector minima, so that consecutive comparisons do not wait on each other.
VECTORS = 4

#: Columns consumed per step of the vector loop.
STEP = LANES * VECTORS

#: :func:`padded_row_min` takes rows of up to this many vector registers in straight-line
#: code (the solver pads rows under 40 columns, so at most 10), not in a loop: a loop's
#: counter, compare and branch would be a third of each row's instructions, in pricing,
#: the solver's hottest part.
UNROLLED_CHUNKS = 10


def _splat(builder, value):
    """``value`` (a double) in every lane of one vector register."""
    vector = ir.Constant(ir.VectorType(ir.DoubleType(), LANES), ir.Undefined)
    for lane in range(LANES):
        vector = builder.insert_element(vector, value, ir.Constant(ir.IntType(32), lane))
    return vector


def _enter_loop(builder, name):
    """Blocks ``NAME_loop`` and ``NAME_done`` after the current one, branched into the loop,
    which the builder then fills. Returns ``(entry, loop, done)``."""
    entry = builder.block
    loop = builder.append_basic_block(f"{name}_loop")
    done = builder.append_basic_block(f"{name}_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    return entry, loop, done


def _differences(builder, row_data, offset_data, at):
    """``row[at : at + LANES] - offset[at : at + LANES]`` as one vector (unaligned loads)."""
    vector_ptr = ir.VectorType(ir.DoubleType(), LANES).as_pointer()
    values = builder.load(builder.bitcast(builder.gep(row_data, [at]), vector_ptr), align=8)
    offsets = builder.load(builder.bitcast(builder.gep(offset_data, [at]), vector_ptr), align=8)
    return builder.fsub(values, offsets)


@intrinsic
def _min_difference_blocks(typingctx, row, offset, count):
    """``min(row[q] - offset[q] for q < count)``; ``count`` a positive multiple of ``STEP``.

    Both arrays must be C-contiguous float64 (checked at typing time), with at least
    ``count`` entries (the caller's duty: the loads are unchecked).
    """
    for array in (row, offset):
        if not (isinstance(array, types.Array) and array.dtype == types.float64 and array.layout == "C"):
            return None
    if not isinstance(count, types.Integer):
        return None
    sig = types.float64(row, offset, types.int64)

    def codegen(context, builder, signature, args):
        row_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        offset_data = context.make_array(signature.args[1])(context, builder, args[1]).data
        count_value = args[2]
        vector = ir.VectorType(ir.DoubleType(), LANES)
        index_type = count_value.type
        start = _splat(builder, builder.fsub(builder.load(row_data), builder.load(offset_data)))
        entry, loop, done = _enter_loop(builder, "row_min")
        index = builder.phi(index_type)
        index.add_incoming(ir.Constant(index_type, 0), entry)
        lows = []
        for _ in range(VECTORS):
            low = builder.phi(vector)
            low.add_incoming(start, entry)
            lows.append(low)
        updated = []
        for j, low in enumerate(lows):
            at = builder.add(index, ir.Constant(index_type, j * LANES))
            difference = _differences(builder, row_data, offset_data, at)
            updated.append(builder.select(builder.fcmp_ordered("<", difference, low), difference, low))
        next_index = builder.add(index, ir.Constant(index_type, STEP))
        index.add_incoming(next_index, loop)
        for low, new in zip(lows, updated, strict=True):
            low.add_incoming(new, loop)
        builder.cbranch(builder.icmp_signed("<", next_index, count_value), loop, done)

        builder.position_at_end(done)
        low = updated[0]
        for other in updated[1:]:
            low = builder.select(builder.fcmp_ordered("<", other, low), other, low)
        result = builder.extract_element(low, ir.Constant(ir.IntType(32), 0))
        for lane in range(1, LANES):
            value = builder.extract_element(low, ir.Constant(ir.IntType(32), lane))
            result = builder.select(builder.fcmp_ordered("<", value, result), value, result)
        return result

    return sig, codegen


@njit(cache=True, nogil=True)
def row_min(row, offset, n):
    """``min(row[q] - offset[q] for q < n)``, ``n >= 1``, in vector registers.

    Args:
        row: C-contiguous float64 array, at least ``n`` long.
        offset: C-contiguous float64 array, at least ``n`` long.
        n: how many columns.

    Returns:
        float64, bit for bit one of the differences.
    """
    if n > row.shape[0] or n > offset.shape[0]:
        raise IndexError("row_min: n exceeds the arrays")
    blocks = n - n % STEP
    low = _min_difference_blocks(row, offset, blocks) if blocks > 0 else row[0] - offset[0]
    for q in range(blocks, n):
        x = row[q] - offset[q]
        low = x if x < low else low
    return low


@intrinsic
def _padded_min_difference(typingctx, flat, start, offset, chunks):
    """``min(flat[start + q] - offset[q] for q < LANES * chunks)``, ``chunks >= 1``.

    One vector register of minima, no scalar tail: the caller pads each row to a multiple
    of ``LANES`` columns with a value no difference reaches. Both arrays must be
    C-contiguous float64 (checked at typing time); the loads are unchecked.
    """
    for array in (flat, offset):
        if not (isinstance(array, types.Array) and array.dtype == types.float64 and array.layout == "C"):
            return None
    if not (isinstance(start, types.Integer) and isinstance(chunks, types.Integer)):
        return None
    sig = types.float64(flat, types.int64, offset, types.int64)

    def codegen(context, builder, signature, args):
        row_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        row_data = builder.gep(row_data, [args[1]])
        offset_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        count = args[3]
        vector = ir.VectorType(ir.DoubleType(), LANES)
        index_type = count.type
        first = _differences(builder, row_data, offset_data, ir.Constant(index_type, 0))
        entry = builder.block
        loop = builder.append_basic_block("padded_min_loop")
        done = builder.append_basic_block("padded_min_done")
        # Up to UNROLLED_CHUNKS chunks: straight-line code, the chunks' minima paired off as
        # a tree; more (never for rows the solver pads): the loop. The row's count of chunks
        # is fixed for a whole solve, so the switch is predicted.
        switch = builder.switch(count, loop)
        switch.add_case(ir.Constant(index_type, 1), done)
        reached = [(first, entry)]
        for size in range(2, UNROLLED_CHUNKS + 1):
            block = builder.append_basic_block(f"padded_min_{size}")
            switch.add_case(ir.Constant(index_type, size), block)
            builder.position_at_end(block)
            level = [first] + [
                _differences(builder, row_data, offset_data, ir.Constant(index_type, j * LANES)) for j in range(1, size)
            ]
            while len(level) > 1:
                pairs = zip(level[::2], level[1::2], strict=False)  # an odd one out waits a level
                paired = [builder.select(builder.fcmp_ordered("<", b, a), b, a) for a, b in pairs]
                level = paired + level[len(paired) * 2 :]
            reached.append((level[0], block))
            builder.branch(done)

        builder.position_at_end(loop)
        chunk = builder.phi(index_type)
        chunk.add_incoming(ir.Constant(index_type, 1), entry)
        low = builder.phi(vector)
        low.add_incoming(first, entry)
        values = _differences(builder, row_data, offset_data, builder.mul(chunk, ir.Constant(index_type, LANES)))
        updated = builder.select(builder.fcmp_ordered("<", values, low), values, low)
        next_chunk = builder.add(chunk, ir.Constant(index_type, 1))
        chunk.add_incoming(next_chunk, loop)
        low.add_incoming(updated, loop)
        builder.cbranch(builder.icmp_signed("<", next_chunk, count), loop, done)

        builder.position_at_end(done)
        final = builder.phi(vector)
        for value, block in reached:
            final.add_incoming(value, block)
        final.add_incoming(updated, loop)
        half = LANES // 2
        lanes = ir.IntType(32)
        low_half = builder.shuffle_vector(final, final, ir.Constant(ir.VectorType(lanes, half), list(range(half))))
        high_half = builder.shuffle_vector(
            final, final, ir.Constant(ir.VectorType(lanes, half), list(range(half, LANES)))
        )
        low = builder.select(builder.fcmp_ordered("<", high_half, low_half), high_half, low_half)
        result = builder.extract_element(low, ir.Constant(lanes, 0))
        for lane in range(1, half):
            value = builder.extract_element(low, ir.Constant(lanes, lane))
            result = builder.select(builder.fcmp_ordered("<", value, result), value, result)
        return result

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def padded_row_min(flat, start, offset, chunks):
    """``min(flat[start + q] - offset[q] for q < LANES * chunks)`` in one vector register.

    For the solver's rows of fewer than ``ROW_MIN_SIMD`` columns, padded to a multiple of
    ``LANES``: inlined, no call and no scalar tail (the plain loop it replaced cost a call
    and a reduction tail per row). Bit for bit one of the differences, like :func:`row_min`.
    The caller guarantees ``start + LANES * chunks <= len(flat)`` and
    ``LANES * chunks <= len(offset)`` (unchecked: this runs once per row per pivot).
    """
    return _padded_min_difference(flat, start, offset, chunks)


@intrinsic
def _padded_first_equal(typingctx, flat, start, offset, chunks, value):
    """The first ``q < LANES * chunks`` with ``flat[start + q] - offset[q] == value``, as the
    trailing zeros of one bit mask built from every chunk's comparison (64 if none): no
    branch that depends on where it is. ``LANES * chunks <= 64``; loads unchecked."""
    for array in (flat, offset):
        if not (isinstance(array, types.Array) and array.dtype == types.float64 and array.layout == "C"):
            return None
    if not all(isinstance(x, types.Integer) for x in (start, chunks)) or not isinstance(value, types.Float):
        return None
    sig = types.int64(flat, types.int64, offset, types.int64, types.float64)

    def codegen(context, builder, signature, args):
        row_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        row_data = builder.gep(row_data, [args[1]])
        offset_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        count = args[3]
        word = ir.IntType(64)
        target = _splat(builder, args[4])
        entry, loop, done = _enter_loop(builder, "first_equal")
        chunk = builder.phi(word)
        chunk.add_incoming(ir.Constant(word, 0), entry)
        bits = builder.phi(word)
        bits.add_incoming(ir.Constant(word, 0), entry)
        at = builder.mul(chunk, ir.Constant(word, LANES))
        equal = builder.fcmp_ordered("==", _differences(builder, row_data, offset_data, at), target)
        mask = builder.zext(builder.bitcast(equal, ir.IntType(LANES)), word)
        updated = builder.or_(bits, builder.shl(mask, at))
        next_chunk = builder.add(chunk, ir.Constant(word, 1))
        chunk.add_incoming(next_chunk, loop)
        bits.add_incoming(updated, loop)
        builder.cbranch(builder.icmp_signed("<", next_chunk, count), loop, done)

        builder.position_at_end(done)
        trailing = builder.module.declare_intrinsic("llvm.cttz", [word, ir.IntType(1)])
        return builder.call(trailing, [updated, ir.Constant(ir.IntType(1), 0)])

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def padded_first_at(flat, start, offset, chunks, n, value):
    """The first ``q < n`` with ``flat[start + q] - offset[q] == value`` (padded rows, as
    :func:`padded_row_min`; ``value`` one of those differences, as that minimum is).

    One comparison per vector register and one trailing-zero count, where a scan stops at
    a branch mispredicted once a row. If no column matched (never, unless a compiler broke
    the equality), the first column of the least difference, as a guard.
    """
    q = _padded_first_equal(flat, start, offset, chunks, value)
    if q >= n:
        q = argmin_difference(flat[start : start + n], offset, n)
    return q


@njit(cache=True, nogil=True)
def argmin_difference(row, offset, n):
    """The first ``q < n`` of the least ``row[q] - offset[q]``: the guard of the solver's
    searches for a known minimum, which runs only if that minimum was not found."""
    best = 0
    for q in range(1, n):
        if row[q] - offset[q] < row[best] - offset[best]:
            best = q
    return best


@intrinsic
def _bit_count(typingctx, x, which):
    """``llvm.ctpop`` (``which == 0``: set bits) or ``llvm.cttz`` (``which == 1``: trailing
    zeros, undefined for 0) of an int64: one instruction each where the CPU has them (POPCNT,
    TZCNT/BSF), where numba offers no intrinsic and a SWAR count takes about a dozen."""
    if not (isinstance(x, types.Integer) and isinstance(which, types.IntegerLiteral)):
        return None
    sig = types.int64(types.int64, which)

    def codegen(context, builder, signature, args):
        word = ir.IntType(64)
        if signature.args[1].literal_value == 0:
            return builder.call(builder.module.declare_intrinsic("llvm.ctpop", [word]), [args[0]])
        function = builder.module.declare_intrinsic("llvm.cttz", [word, ir.IntType(1)])
        return builder.call(function, [args[0], ir.Constant(ir.IntType(1), 1)])

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def popcount(x):
    """Set bits of an int64."""
    return _bit_count(x, 0)


@njit(cache=True, nogil=True, inline="always")
def lowest_bit(x):
    """Index of the lowest set bit of a non-zero int64."""
    return _bit_count(x, 1)
