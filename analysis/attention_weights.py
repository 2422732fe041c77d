"""Attention weights of one head with and without couplings: the docs' gallery picture.

One causal head over T = 16 positions, the same random queries and keys in every panel:

* softmax attention (the baseline);
* Boltzmann attention with ``J = 0`` (normalized sigmoid attention);
* Boltzmann attention with cooperative couplings (``J > 0`` between keys up to 2 apart: keys
  next to each other are attended together, the pattern smears along the key axis);
* Boltzmann attention with exclusive couplings (``J < 0``: neighbouring keys compete, the pattern
  thins out).

The Boltzmann panels use exact inference (``method="transfer"``, banded couplings) and the
marginal readout; queries are scaled so that the fields span a few units, the chemical
potential is -2 and beta 1 (colours saturate at 0.6). Writes ``<out>/attention_weights.png``
in a few seconds on a CPU. Run::

    .venv/bin/python analysis/attention_weights.py --out docs/images
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.attention import Couplings, boltzmann_attention

T, H = 16, 8


def weights(seed=0):
    kq, kk = jax.random.split(jax.random.key(seed))
    q = 2.5 * jax.random.normal(kq, (1, T, 1, H))  # fields of a few units: a sparse pattern
    k = jax.random.normal(kk, (1, T, 1, H))
    v = jnp.zeros_like(k)
    panels = [("softmax", {"readout": "softmax"}),
              ("Boltzmann, J = 0\n(normalized sigmoid)", {"couplings": None})]
    for title, w in (("cooperative couplings\nJ(1) = J(2) = +1", 1.0),
                     ("exclusive couplings\nJ(1) = J(2) = -2", -2.0)):
        panels.append((title, {"couplings": Couplings.fixed(jnp.full((1, 2), w), "banded")}))
    out = []
    for title, kw in panels:
        kw.setdefault("readout", "marginal")
        if kw["readout"] != "softmax":
            kw.update(method="transfer", chemical_potential=-2.0)
        _, info = boltzmann_attention(q, k, v, is_causal=True, return_weights=True, **kw)
        out.append((title, np.asarray(info.weights[0, 0])))
    return out


def plot(panels, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3.2 * len(panels), 6.2), constrained_layout=True)
    grid = fig.add_gridspec(2, len(panels), height_ratios=[3.2, 1.6])
    axes = [fig.add_subplot(grid[0, c]) for c in range(len(panels))]
    vmax = 0.6  # the first queries (one or two keys) would set the scale otherwise
    for ax, (title, w) in zip(axes, panels):
        im = ax.imshow(np.ma.masked_where(np.triu(np.ones_like(w), 1) > 0, w), cmap="magma_r",
                       vmin=0, vmax=vmax)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key j")
        ax.set_xticks([0, 5, 10, 15])
        ax.set_yticks([0, 5, 10, 15])
    axes[0].set_ylabel("query i")
    fig.colorbar(im, ax=axes, shrink=0.8, label="weight $a_{ij}$", extend="max")
    row = fig.add_subplot(grid[1, :])
    for (title, w), style in zip(panels, ("k-o", "C0-s", "C1-^", "C2-v")):
        row.plot(np.arange(T), w[T - 1], style, ms=4, lw=1, label=title.replace("\n", " "))
    row.set_xlabel("key j")
    row.set_ylabel(f"$a_{{{T - 1},j}}$")
    row.set_title(f"the last query (i = {T - 1})", fontsize=10)
    row.set_xticks(range(T))
    row.grid(alpha=0.3)
    row.legend(fontsize=8, ncol=2)
    fig.suptitle("One causal head, same queries and keys: attention weights", fontsize=11)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Attention weights of one causal head (T = 16) with and without couplings "
        "between keys: softmax, J = 0, cooperative and exclusive banded couplings, exact by "
        "transfer, on the same random queries and keys. Writes attention_weights.png (the "
        "docs' gallery picture) in a few seconds.")
    ap.add_argument("--out", default=os.path.join("analysis", "results"),
                    help="folder to write attention_weights.png into (created if missing; the "
                    "docs' copy lives in docs/images)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random queries and keys (every panel uses the same)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "attention_weights.png")
    plot(weights(args.seed), path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
