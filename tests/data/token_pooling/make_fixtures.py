#!/usr/bin/env python3
"""Builds tests/data/token_pooling/ward_cases.txt, the scipy reference for
index/token_pooling.h.

Run with Debian's python3-scipy and python3-numpy (apt-get install
python3-scipy), from anywhere:

    /usr/bin/python3 tests/data/token_pooling/make_fixtures.py

Generated with scipy 1.10.1 and numpy 1.24.2 (Debian 12). For each case it
draws float32 tokens from a fixed seed and writes the groups scipy gives:

    d      = 1 - cos(t_i, t_j), in float64 from the float32 tokens
    Z      = linkage(squareform(d, checks=False), method="ward")
    labels = fcluster(Z, t=k, criterion="maxclust"),  k = ceil(n / pool_factor)

i.e. Ward's Lance-Williams update applied to the condensed cosine
distances, which is what the C++ reproduces. (PyLate passes the square
matrix to linkage instead, which scipy reads as observation vectors; that
is not what these fixtures check.) A case whose cut falls on merges of
equal height (where fcluster would give fewer than k groups) is redrawn
with the next seed, so every case has exactly k groups.

Format (text, one case after another):
    case <name> <n> <dim> <pool_factor> <k>
    <n lines of dim float32 values, %.9g: exact>
    labels <n fcluster labels>
The output is deterministic for a given numpy and scipy.
"""

import math
import os

import numpy as np
import scipy
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

HERE = os.path.dirname(os.path.abspath(__file__))

# name, n, dim, pool_factor, seed, centres (0: isotropic), normalise rows
CASES = [
    ("n7_unit", 7, 8, 2, 7, 0, True),
    ("n20_unit", 20, 16, 3, 20, 0, True),
    ("n20_clustered", 20, 16, 4, 21, 5, True),
    ("n50_unit", 50, 16, 2, 50, 0, True),
    ("n50_clustered", 50, 16, 5, 51, 8, True),
    ("n50_raw", 50, 8, 3, 52, 0, False),
    ("n33_clustered_raw", 33, 8, 4, 33, 6, False),
]


def tokens_for(n, dim, seed, centres, normalise):
    rng = np.random.default_rng(seed)
    if centres:
        c = rng.standard_normal((centres, dim))
        x = c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, dim))
    else:
        x = rng.standard_normal((n, dim))
    x = x.astype(np.float32)
    if normalise:
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return x


def scipy_labels(x, k):
    x64 = x.astype(np.float64)
    norms = np.linalg.norm(x64, axis=1)
    d = 1.0 - (x64 @ x64.T) / np.outer(norms, norms)
    z = linkage(squareform(d, checks=False), method="ward")
    heights = np.sort(z[:, 2])
    n = len(x)
    # The cut takes the n - k lowest merges; refuse ties (and near-ties,
    # which fp32 dot products might reorder) across it.
    if k < n and heights[n - k] - heights[n - k - 1] < 1e-6:
        return None
    return fcluster(z, t=k, criterion="maxclust")


def main():
    lines = []
    for name, n, dim, pool_factor, seed, centres, normalise in CASES:
        k = math.ceil(n / pool_factor)
        while True:
            x = tokens_for(n, dim, seed, centres, normalise)
            labels = scipy_labels(x, k)
            if labels is not None and len(set(labels)) == k:
                break
            seed += 1000
        lines.append(f"case {name} {n} {dim} {pool_factor} {k}")
        for row in x:
            lines.append(" ".join("%.9g" % v for v in row))
        lines.append("labels " + " ".join(str(v) for v in labels))
    with open(os.path.join(HERE, "ward_cases.txt"), "w") as f:
        f.write(f"# scipy {scipy.__version__}, numpy {np.__version__}; "
                "see make_fixtures.py\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
