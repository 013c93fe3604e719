"""PNG figures of a run (matplotlib, Agg backend, no global pyplot state).

Each function takes plain data (rows of dicts, nested lists) and returns the PNG bytes, so the
report embeds them and the caller decides where they are written. The PNGs carry no timestamp
or version metadata: the same inputs give byte-identical files.
"""

from __future__ import annotations

import io as _bytes_io

import numpy as np

from gnnpipe.reporting.node_metric import METRIC_NAMES

GNN_COLOR, MLP_COLOR, EXTRA_COLOR = "#1f77b4", "#ff7f0e", "#2ca02c"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buffer = _bytes_io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None}, bbox_inches="tight",
                pad_inches=0.1)
    return buffer.getvalue()


def _column(rows: list[dict], key: str) -> np.ndarray:
    return np.array([float(row[key]) for row in rows])


def training_curves(gnn_rows: list[dict], mlp_rows: list[dict], model: str,
                    val_key: str = "val_acc", baseline: str = "mlp") -> bytes:
    """Train loss and the validation metric (``val_acc``, ``val_<metric>`` for the metric a node
    run is judged on, ``val_mrr`` for links) per epoch of the GNN and the structure-free
    ``baseline`` (its name in the legend)."""
    fig = _figure(9, 3.4)
    loss_ax, acc_ax = fig.subplots(1, 2)
    for rows, name, color in ((gnn_rows, model, GNN_COLOR), (mlp_rows, baseline, MLP_COLOR)):
        if not rows:
            continue
        epoch = _column(rows, "epoch")
        loss_ax.plot(epoch, _column(rows, "train_loss"), color=color, label=name)
        val = _column(rows, val_key)
        acc_ax.plot(epoch, val, color=color, label=f"{name} (best {val.max():.3f})")
        acc_ax.axvline(epoch[int(val.argmax())], color=color, linestyle=":", linewidth=1)
    loss_ax.set(xlabel="epoch", ylabel="train loss", title="training loss")
    label = {"val_acc": "accuracy", **{f"val_{key}": name for key, name in METRIC_NAMES.items()}
             }.get(val_key, val_key)
    acc_ax.set(xlabel="epoch", ylabel=label, title=f"validation {label} (dotted: best epoch)")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    return _png(fig)


def confusion_matrices(matrices: dict[str, list[list[int]]]) -> bytes:
    """Row-normalised confusion matrices side by side (rows = true class), counts annotated."""
    fig = _figure(4.2 * len(matrices), 3.8)
    axes = np.atleast_1d(fig.subplots(1, len(matrices)))
    for ax, (title, matrix) in zip(axes, matrices.items()):
        counts = np.asarray(matrix, dtype=np.int64)
        rows = counts.sum(axis=1, keepdims=True)
        share = np.divide(counts, rows, out=np.zeros(counts.shape), where=rows > 0)
        image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
        c = counts.shape[0]
        if c <= 20:  # beyond that the numbers are unreadable; the colours still tell
            for (i, j), count in np.ndenumerate(counts):
                ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                        color="white" if share[i, j] > 0.5 else "black")
        ticks = np.arange(c) if c <= 20 else np.linspace(0, c - 1, 5).astype(int)
        ax.set(xticks=ticks, yticks=ticks, xlabel="predicted class", ylabel="true class",
               title=title)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="fraction of the true class")
    return _png(fig)


def per_class_f1(gnn_f1: list[float], mlp_f1: list[float], model: str,
                 baseline: str = "mlp") -> bytes:
    """Per-class test F1 of the GNN and the structure-free ``baseline`` as grouped bars."""
    c = len(gnn_f1)
    fig = _figure(max(5.0, 0.5 * c + 2), 3.2)
    ax = fig.subplots()
    x = np.arange(c)
    ax.bar(x - 0.2, gnn_f1, width=0.4, color=GNN_COLOR, label=model)
    ax.bar(x + 0.2, mlp_f1, width=0.4, color=MLP_COLOR, label=baseline)
    ax.set(xlabel="class", ylabel="test F1", ylim=(0, 1.05), title="per-class F1 (test)")
    if c <= 30:
        ax.set_xticks(x)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return _png(fig)


def degree_histogram(rows: list[dict]) -> bytes:
    """Nodes per log2 degree bin (``gnnpipe.graphops.analyze.degree_histogram`` rows), log count axis."""
    fig = _figure(6.5, 3.2)
    ax = fig.subplots()
    counts = _column(rows, "nodes")
    ax.bar(np.arange(len(rows)), np.maximum(counts, 0), color=GNN_COLOR)
    ax.set_xticks(np.arange(len(rows)), [str(row["bin"]) for row in rows], rotation=45,
                  ha="right")
    if counts.max(initial=0) > 0:
        ax.set_yscale("log")
    ax.set(xlabel="degree", ylabel="nodes", title="degree distribution (log2 bins)")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def depth_sweep(rows: list[dict], param: str, metric: str = "accuracy") -> bytes:
    """The judged test ``metric`` (left; columns ``gnn_test_<metric>``, ``mlp_test_<metric>``)
    and over-smoothing figures (right) against the swept ``param`` (depth)."""
    fig = _figure(10, 3.6)
    acc_ax, smooth_ax = fig.subplots(1, 2)
    depth = _column(rows, param)
    name = METRIC_NAMES.get(metric, metric)
    acc_ax.plot(depth, _column(rows, f"gnn_test_{metric}"), "o-", color=GNN_COLOR, label="GNN")
    acc_ax.plot(depth, _column(rows, f"mlp_test_{metric}"), "s--", color=MLP_COLOR,
                label="MLP baseline")
    acc_ax.set(xlabel=param, ylabel=f"test {name}", title=f"{name} vs depth")
    smooth_ax.plot(depth, _column(rows, "cosine_similarity"), "o-", color=GNN_COLOR,
                   label="mean pairwise cosine similarity")
    smooth_ax.plot(depth, _column(rows, "rayleigh_quotient"), "^-", color=EXTRA_COLOR,
                   label="normalised Dirichlet energy")
    smooth_ax.set(xlabel=param, title="over-smoothing of the GNN outputs")
    energy_ax = smooth_ax.twinx()  # the raw energy has its own scale
    energy_ax.plot(depth, _column(rows, "dirichlet_energy"), "x:", color="#7f7f7f",
                   label="Dirichlet energy (right axis)")
    energy_ax.set_yscale("symlog")
    energy_ax.set_ylabel("Dirichlet energy")
    handles = smooth_ax.get_legend_handles_labels()
    extra = energy_ax.get_legend_handles_labels()
    smooth_ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, ncol=2,
                     loc="upper center", bbox_to_anchor=(0.5, -0.18))  # below: no data hidden
    for ax in (acc_ax, smooth_ax):
        ax.set_xticks(depth)
        ax.grid(alpha=0.3)
    acc_ax.legend()
    return _png(fig)
