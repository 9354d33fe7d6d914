"""Progress bars of long work (a fit's trees, paths and pairs)."""

from __future__ import annotations

from tqdm.auto import tqdm

__all__ = ["ProgressBar"]


class ProgressBar(tqdm):
    """A tqdm bar whose rate and time estimate start at its first step.

    The first step of a fit's bars comes after work that is not the pace of the rest (the
    engine's set-up before any pair is done; a first chunk of graphs done at once), and tqdm's
    default reading of it (a rate and an estimate from that one step, then smoothed) showed
    millions of graphs a second, or hours left, at the start. Here the first step shows no rate;
    each later one the average pace since the first step (``smoothing=0``), and the estimate
    from it.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("smoothing", 0)
        super().__init__(*args, **kwargs)
        self._first_step_done = False

    def update(self, n: float = 1):
        if self.disable or self._first_step_done:
            return super().update(n)
        self._first_step_done = True
        self.n += n
        # The pace is counted from here: tqdm's rate is (n - initial) / (now - start_t).
        self.initial = self.n
        self.start_t = self.last_print_t = self._time()
        self.last_print_n = self.n
        self.refresh()
        return True
