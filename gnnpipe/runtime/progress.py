"""Progress of long work: a bar on a terminal, a short line at most every 30 s elsewhere.

On a terminal (stderr is a TTY) ``progress`` is a tqdm bar. Off a terminal (``make repro >
log``, ``dvc queue logs``, CI) a bar would be one endless line of carriage returns, so it prints
one plain line to stderr at most every ``LINE_EVERY_S`` (and its last state when it closes):
what, how far, elapsed < remaining, rate and the loop's own figures (epoch loss, val score).
``heartbeat`` covers the stretches no loop reports: off a terminal it prints that the stage is
still running whenever no line was printed for ``LINE_EVERY_S``. ``GNNPIPE_PROGRESS=0`` silences
both (the tests set it).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterable, Iterator

from tqdm.auto import tqdm

LINE_EVERY_S = 30.0
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
_last_line = [time.monotonic()]  # when a progress line last went out (heartbeat reads it)


def mode() -> str:
    """``off`` (GNNPIPE_PROGRESS=0), ``bar`` (stderr is a terminal) or ``lines``."""
    if os.environ.get("GNNPIPE_PROGRESS", "1") == "0":
        return "off"
    return "bar" if sys.stderr.isatty() else "lines"


class LineProgress(tqdm):
    """tqdm that writes whole lines, at most one per ``mininterval`` seconds, plus the last."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """A line of the current state; a message (tqdm's clearing of the bar) prints nothing
        and returns False, so no carriage return follows."""
        if msg is not None or self.disable:
            return False
        self.fp.write(str(self).rstrip() + "\n")
        self.fp.flush()
        _last_line[0] = time.monotonic()
        return True

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        """The figures go out with the next line, not as a line of their own."""
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def close(self) -> None:
        if not self.disable and self.last_print_n != self.n:
            self.display()  # the final count, which the interval may have held back
        super().close()


def progress(iterable: Iterable | None = None, **kwargs) -> tqdm:
    """``tqdm`` over ``iterable`` (or a manual one: ``update(n)``, ``close()``), in the current
    ``mode``."""
    current = mode()
    if current == "lines":
        kwargs.setdefault("bar_format", LINE_FORMAT)
        return LineProgress(iterable, file=sys.stderr, mininterval=LINE_EVERY_S,
                            maxinterval=LINE_EVERY_S, miniters=1, leave=False, **kwargs)
    return tqdm(iterable, disable=current == "off", dynamic_ncols=True, leave=False, **kwargs)


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = LINE_EVERY_S) -> Iterator[None]:
    """Off a terminal, ``<what>: running, <m:ss> elapsed`` on stderr whenever nothing was printed
    for ``every_s``; nothing on a terminal or with GNNPIPE_PROGRESS=0."""
    if mode() != "lines":
        yield
        return
    started = _last_line[0] = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(min(every_s, 1.0)):
            now = time.monotonic()
            if now - _last_line[0] >= every_s:
                minutes, seconds = divmod(int(now - started), 60)
                print(f"{what}: running, {minutes}:{seconds:02d} elapsed", file=sys.stderr,
                      flush=True)
                _last_line[0] = now

    thread = threading.Thread(target=beat, name="gnnpipe-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
