#!/usr/bin/env python3
"""Builds the PLAID importer fixtures under tests/data/plaid/.

Run with Debian's python3-torch and python3-numpy (apt-get install
python3-torch), from anywhere:

    /usr/bin/python3 tests/data/plaid/make_fixtures.py

It writes one tiny index (8 centroids, dim 16, nbits 2, 5 documents of
3, 1, 4 | 2, 5 embeddings in 2 chunks) twice, in the layout of each writer:

  colbert/     as stanford-futuredata/ColBERT v2 saves it (torch.save files)
  fast_plaid/  as lightonai/fast-plaid saves it (.npy files)

and, computed here from the bucket indices before they are packed (so
independently of any unpacking code), the embeddings an importer must decode:

  expected_tokens.npy      float32 [15, 16], L2-normalised
  expected_cu_seqlens.npy  int64 [6]

plus torch/, a few torch.save files for the reader of that format.

The residual packing follows what both writers do: torch.bucketize gives
each dimension a bucket index, its nbits bits are laid out least
significant first, dimension after dimension, and numpy.packbits (bit order
"big") packs them into bytes. The generated files are committed, so CI never
needs torch; rerun this script only to change them (its output is
deterministic for a given torch and numpy).
"""

import collections
import json
import os
import shutil

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DIM, NBITS, NUM_CENTROIDS = 16, 2, 8
CHUNK_DOCLENS = [[3, 1, 4], [2, 5]]


def normalize(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def pack_residuals(buckets):
    """[n, dim] bucket indices -> [n, dim * nbits / 8] uint8, as written."""
    bits = (buckets[..., None] >> np.arange(NBITS)) & 1  # LSB first
    packed = np.packbits(bits.astype(np.uint8).reshape(-1))  # bitorder big
    return packed.reshape(buckets.shape[0], DIM * NBITS // 8)


def unpack_like_colbert(packed):
    """Decodes bucket indices with ColBERT's lookup-table description (a
    per-group bit reversal, then itertools.product order), as a check that
    pack_residuals matches the readers."""
    mask = (1 << NBITS) - 1
    per_byte = 8 // NBITS
    out = np.zeros((packed.shape[0], DIM), dtype=np.int64)
    for i in range(packed.shape[0]):
        for j in range(packed.shape[1]):
            byte = int(packed[i, j])
            for s in range(per_byte):
                group = (byte >> (8 - (s + 1) * NBITS)) & mask
                rev = int(format(group, f"0{NBITS}b")[::-1], 2)
                out[i, j * per_byte + s] = rev
    return out


def write_json(path, value, indent=None):
    with open(path, "w") as f:
        f.write(json.dumps(value, indent=indent) + ("\n" if indent else ""))


def main():
    rng = np.random.default_rng(20240611)
    doclens = [d for chunk in CHUNK_DOCLENS for d in chunk]
    n = sum(doclens)

    centroids = normalize(rng.standard_normal((NUM_CENTROIDS, DIM)))
    centroids = centroids.astype(np.float16)
    # Embeddings near the centroids, so that residuals are small as in a
    # real index; every centroid is used.
    base = np.arange(n) % NUM_CENTROIDS
    embs = centroids[base].astype(np.float32) + 0.3 * rng.standard_normal(
        (n, DIM))
    embs = normalize(embs).astype(np.float16)
    codes = np.argmax(embs.astype(np.float32) @ centroids.astype(
        np.float32).T, axis=1).astype(np.int64)
    residual = embs.astype(np.float32) - centroids[codes].astype(np.float32)

    num_options = 1 << NBITS
    quantiles = np.arange(num_options) / num_options
    cutoffs = np.quantile(residual, quantiles[1:]).astype(np.float32)
    weights = np.quantile(residual, quantiles + 0.5 / num_options)
    weights = weights.astype(np.float16)  # ColBERT saves them as fp16 on GPU
    # torch.bucketize(right=False): the number of cutoffs strictly below.
    buckets = np.searchsorted(cutoffs, residual, side="left").astype(np.int64)
    assert set(np.unique(buckets)) == set(range(num_options))
    packed = pack_residuals(buckets)
    assert (unpack_like_colbert(packed) == buckets).all()

    expected = (centroids[codes].astype(np.float32) +
                weights.astype(np.float32)[buckets])
    expected = expected / np.maximum(
        np.linalg.norm(expected, axis=1, keepdims=True), 1e-12)
    np.save(os.path.join(HERE, "expected_tokens.npy"),
            expected.astype(np.float32))
    np.save(os.path.join(HERE, "expected_cu_seqlens.npy"),
            np.concatenate([[0], np.cumsum(doclens)]).astype(np.int64))

    # Embedding ranges of the chunks.
    bounds, at = [], 0
    for chunk in CHUNK_DOCLENS:
        bounds.append((at, at + sum(chunk)))
        at += sum(chunk)
    ivf_order = np.argsort(codes, kind="stable")
    ivf_lengths = np.bincount(codes, minlength=NUM_CENTROIDS)

    # --- ColBERT v2 ---------------------------------------------------------
    d = os.path.join(HERE, "colbert")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    config = {"dim": DIM, "nbits": NBITS, "doc_maxlen": 180,
              "checkpoint": "fixture", "similarity": "cosine",
              "kmeans_niters": 4, "index_path": None, "resume": False}
    write_json(os.path.join(d, "plan.json"),
               {"config": config, "num_chunks": len(CHUNK_DOCLENS),
                "num_partitions": NUM_CENTROIDS, "num_embeddings_est": float(n),
                "avg_doclen_est": n / len(doclens)}, indent=4)
    write_json(os.path.join(d, "metadata.json"),
               {"config": config, "num_chunks": len(CHUNK_DOCLENS),
                "num_partitions": NUM_CENTROIDS, "num_embeddings": n,
                "avg_doclen": n / len(doclens)}, indent=4)
    torch.save(torch.from_numpy(centroids), os.path.join(d, "centroids.pt"))
    torch.save((torch.from_numpy(cutoffs), torch.from_numpy(weights)),
               os.path.join(d, "buckets.pt"))
    torch.save(torch.tensor(float(np.abs(residual).mean()),
                            dtype=torch.float16),
               os.path.join(d, "avg_residual.pt"))
    passage_offset = 0
    for i, (lo, hi) in enumerate(bounds):
        torch.save(torch.from_numpy(codes[lo:hi].astype(np.int32)),
                   os.path.join(d, f"{i}.codes.pt"))
        torch.save(torch.from_numpy(packed[lo:hi].copy()),
                   os.path.join(d, f"{i}.residuals.pt"))
        write_json(os.path.join(d, f"doclens.{i}.json"), CHUNK_DOCLENS[i])
        write_json(os.path.join(d, f"{i}.metadata.json"),
                   {"passage_offset": passage_offset,
                    "num_passages": len(CHUNK_DOCLENS[i]),
                    "num_embeddings": hi - lo, "embedding_offset": lo},
                   indent=4)
        passage_offset += len(CHUNK_DOCLENS[i])
    torch.save((torch.from_numpy(ivf_order.astype(np.int32)),
                torch.from_numpy(ivf_lengths.astype(np.int64))),
               os.path.join(d, "ivf.pid.pt"))

    # --- fast-plaid ---------------------------------------------------------
    d = os.path.join(HERE, "fast_plaid")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    write_json(os.path.join(d, "plan.json"),
               {"nbits": NBITS, "num_chunks": len(CHUNK_DOCLENS)}, indent=2)
    write_json(os.path.join(d, "metadata.json"),
               {"num_chunks": len(CHUNK_DOCLENS), "nbits": NBITS,
                "num_partitions": NUM_CENTROIDS, "num_embeddings": n,
                "avg_doclen": n / len(doclens), "num_documents": len(doclens)},
               indent=2)
    np.save(os.path.join(d, "centroids.npy"), centroids)  # fp16, as written
    np.save(os.path.join(d, "bucket_cutoffs.npy"), cutoffs)
    np.save(os.path.join(d, "bucket_weights.npy"), weights.astype(np.float32))
    np.save(os.path.join(d, "avg_residual.npy"),
            np.abs(residual).mean(axis=0).astype(np.float32))
    np.save(os.path.join(d, "cluster_threshold.npy"),
            np.float32(np.quantile(np.linalg.norm(residual, axis=1), 0.75)))
    for i, (lo, hi) in enumerate(bounds):
        np.save(os.path.join(d, f"{i}.codes.npy"), codes[lo:hi])
        np.save(os.path.join(d, f"{i}.residuals.npy"), packed[lo:hi])
        write_json(os.path.join(d, f"doclens.{i}.json"), CHUNK_DOCLENS[i])
        write_json(os.path.join(d, f"{i}.metadata.json"),
                   {"num_documents": len(CHUNK_DOCLENS[i]),
                    "num_embeddings": hi - lo, "embedding_offset": lo},
                   indent=2)
    np.save(os.path.join(d, "ivf.npy"), ivf_order.astype(np.int64))
    np.save(os.path.join(d, "ivf_lengths.npy"), ivf_lengths.astype(np.int32))

    # --- torch.save files for the format reader -----------------------------
    d = os.path.join(HERE, "torch")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    values = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2
    torch.save([values.to(t) for t in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64,
        torch.int8, torch.int16, torch.int32, torch.int64)] +
        [(values + 2).to(torch.uint8), (values > 0)],
        os.path.join(d, "dtypes.pt"))
    storage = torch.arange(10, dtype=torch.int64)
    # A view at storage offset 3 (torch.save keeps the whole storage), the
    # same tensor twice and a second view of the storage.
    torch.save((storage[3:7], storage[3:7], storage[8:]),
               os.path.join(d, "views.pt"))
    torch.save(torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
               os.path.join(d, "transposed.pt"))
    torch.save((1, -70000, 2**40, -2**40, 0.5, True, False, None, "s",
                {"k": torch.zeros(0, 4)}),
               os.path.join(d, "scalars.pt"))
    torch.save(collections.OrderedDict(a=torch.ones(2)),
               os.path.join(d, "ordered_dict.pt"))


if __name__ == "__main__":
    main()
