"""``python -m gnnpipe.training.torchrun <torchrun arguments>``: torchrun's agent, quiet, with a
one-line outcome.

``gnnpipe.training.distributed.run_under_torchrun`` starts it (``torchrun_argv`` builds the command)
and reads the outcome. The agent dies with that process (``PR_SET_PDEATHSIG``; torch's agent then
stops its workers), and its workers die with it. The elastic agent's logging and the c10d
store's connect retries (C++ log) are silenced unless ``GNNPIPE_DEBUG`` is set; a rendezvous
that timed out, an endpoint that cannot be reached or a failed worker is written as one JSON
record (``kind``, ``detail``) to ``<GNNPIPE_LAUNCH_STATUS>/error.json`` for the launcher to
word with the params keys, and the agent exits 1. Workers keep their own stdout / stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

from gnnpipe.training.distributed import (CPP_LOG_ENV, PARENT_ENV, STATUS_ENV, die_with_parent,
                                          first_line)


def main(argv: list[str]) -> int:
    die_with_parent(int(os.environ[PARENT_ENV]))
    os.environ[PARENT_ENV] = str(os.getpid())  # the workers die with this agent
    _restore_cpp_log_level()
    if not os.environ.get("GNNPIPE_DEBUG"):
        logging.disable(logging.CRITICAL)  # the agent's INFO / WARNING lines and tracebacks
        warnings.simplefilter("ignore")
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import (RendezvousConnectionError,
                                                          RendezvousTimeoutError)

    try:
        torchrun.run(torchrun.parse_args(argv))
        return 0
    except RendezvousTimeoutError:
        report = {"kind": "rdzv_timeout"}
    except RendezvousConnectionError as err:
        report = {"kind": "rdzv_connect", "detail": first_line(err.__cause__ or err).rstrip(".")}
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with code {failure.exitcode}")
        report = {"kind": "worker", "detail": f"rank {rank} {how}"}
    except SignalException as err:
        report = {"kind": "signal", "detail": f"torchrun stopped by {err.sigval.name}"}
    except Exception as err:  # noqa: BLE001 - any other agent failure: one line, not a traceback
        if os.environ.get("GNNPIPE_DEBUG"):
            raise
        report = {"kind": "error", "detail": f"torchrun: {type(err).__name__}: {first_line(err)}"}
    Path(os.environ[STATUS_ENV], "error.json").write_text(json.dumps(report))
    return 1


def _restore_cpp_log_level() -> None:
    """The launcher started this agent with TORCH_CPP_LOG_LEVEL=FATAL (read when torch loads);
    its workers get the user's level back."""
    if CPP_LOG_ENV not in os.environ:
        return
    user = os.environ.pop(CPP_LOG_ENV)
    if user:
        os.environ["TORCH_CPP_LOG_LEVEL"] = user
    else:
        os.environ.pop("TORCH_CPP_LOG_LEVEL", None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
