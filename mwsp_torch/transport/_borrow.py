"""Array views that numba does not reference-count, for the exact solver's hot loops.

Why: numba counts references to an array's memory with atomic (``lock``-prefixed) adds
whenever a new variable holds it (an inlined helper's argument, a slice, a loop's iterator),
and its pruning pass removes only the pairs it can see within simple control flow. An NCI1
solve makes about 275 increments and 280 decrements, about ten a pivot. Whether that costs
anything depends on the CPU: an uncontended atomic add costs about a plain one on AMD's Zen 3,
but on an Intel Xeon the same solves took up to 1.5x longer with atomic counts than with plain
ones (``docs/performance.md``).

:func:`borrowed` and :func:`borrowed_run` return views whose memory-info pointer is null, so
numba's increments and decrements of them return at once (its runtime checks for null
first). A borrowed view does not keep its memory alive: the caller must hold the owning
array, by a use of it after the view's last use (:func:`release` is such a use), for as long
as the view is read or written. The solver's arguments are held by its caller for the whole
call; its own work arrays are released at its end.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _null_owner(context, builder, view):
    """Clear ``view``'s memory-info and parent pointers (numba's owner of the data)."""
    view.meminfo = cgutils.get_null_value(view.meminfo.type)
    view.parent = cgutils.get_null_value(view.parent.type)
    return view._getvalue()


@intrinsic
def borrowed(typingctx, array):
    """The same array (shape, strides, data) without an owner: not reference-counted."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        view = context.make_array(signature.args[0])(context, builder, value=args[0])
        return _null_owner(context, builder, view)

    return array(array), codegen


@intrinsic
def borrowed_run(typingctx, array, start, size):
    """``array[start : start + size]`` of a C-contiguous 1-D array, without an owner and
    without bounds checks (the caller's duty)."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"):
        return None
    if not (isinstance(start, types.Integer) and isinstance(size, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        # The signature takes start and size as intp, so numba has converted them already;
        # populate_array leaves the memory-info and parent pointers null.
        aryty = signature.args[0]
        source = context.make_array(aryty)(context, builder, value=args[0])
        view = context.make_array(aryty)(context, builder)
        context.populate_array(
            view,
            data=builder.gep(source.data, [args[1]]),
            shape=cgutils.pack_array(builder, [args[2]]),
            strides=cgutils.pack_array(builder, [source.itemsize]),
            itemsize=source.itemsize,
            meminfo=None,
        )
        return view._getvalue()

    return array(array, types.intp, types.intp), codegen


@intrinsic
def release(typingctx, array):
    """A use of ``array`` that does nothing: the owner of borrowed views stays alive (numba
    frees an array after its variable's last use) until this point."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(array), codegen
