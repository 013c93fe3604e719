"""split: assign node roles (or hold out edges for dataset.task link), build per-phase message
graphs, audit them, write data/split and data/features. The run of each dataset.task (one
block algorithm on either cluster.engine) is in gnnpipe/splitting/stage.py; here the audit
report is published first, and the split and the fitted transforms only when every check
passed."""

from gnnpipe import io
from gnnpipe.config import load_params
from gnnpipe.data import features
from gnnpipe.splitting import audit, stage


def run(args):
    params = load_params(args.params)
    with stage.RUNS[params.dataset.task](args.prepared, params, args.out) as staged:
        # the audit report, then (every check passed) data/split and data/features after it, so
        # a failed audit writes neither; a failed one is published at once, alone: it says why
        # the stage fails
        io.write_json(args.audit, staged.report, now=not staged.report["passed"])
        audit.raise_if_failed(staged.report)
        with io.atomic_dir(args.out) as out:
            staged.write(out)
        with io.atomic_dir(args.features) as out:
            features.write_transforms(out, params.features.normalize, staged.fitted)
    return staged.summary(args.out)
