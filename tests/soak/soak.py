#!/usr/bin/env python3
"""Bounded soak test: mixed load on a live maxsimd, checked against a model.

Starts the server binary (``--server``) on a free port with a temporary
``--data_dir`` and ``--files_dir``, compaction every second and small sealed
segments, so that compaction merges and rewrites segments all the time. For
``--duration`` seconds it then runs:

- one writer: AddDocuments (1 to 8 documents), DeleteDocuments of a
  corpus's oldest documents (so that each corpus stays within one write of
  its size in tokens, and memory has no reason to grow), SetAlias swaps of
  ``soak_live`` between ``soak_a`` and ``soak_b``, and every few seconds
  SnapshotCorpus, LoadCorpus of the snapshot under a new name, a scan of
  the copy checked against the model, and DropCorpus;
- query threads: Rerank (scans and candidate lists; two threads),
  RerankBatch and RerankStream (request ids, a window of requests in
  flight), against the corpora (see CORPORA) and the alias;
- a sampler of the server's resident memory (VmRSS) and of its corpora's
  token storage (/metrics), about once a second, timing every scrape;
- unless ``--no_hostile``, the hostile mix (start_hostile), with the
  server's write and connection limits made short (HOSTILE_SERVER_FLAGS,
  before the ``--server_flag`` ones): AddDocuments streams that stall until
  the server ends them (--write_idle_timeout), probes that open more
  streams than --max_write_streams allows, idle and slow TCP connections to
  the gRPC and metrics ports, and messages that are not valid protocol
  buffers to the unary methods, inside RerankStreams and inside
  AddDocuments streams.
  Every expected outcome is counted by action; any other fails the run.
  The hostile streams write documents to the modelled corpora under ids the
  writer never uses, so that a commit of any of them fails the checks of
  the answers and of the final state.

The model: the writer keeps every live document as the server stores it
(normalised, rounded to the storage dtype) and a version number, bumped
after every acknowledged write; the state of each version is kept while a
request may still be checked against it. A request records the acknowledged
version before it is sent and after its answer; the answer must equal the
numpy MaxSim reference of some version in [before, after + 1] (+1: a write
the server applied but whose acknowledgement had not arrived). Each query
of a RerankBatch is checked on its own: the API resolves each query's
corpus separately.

A reference ranking is equal when it has min(top_k, pool) results, no
repeated id, every id in the pool with its reference score (within
ATOL + RTOL * |score|), scores non-increasing, and no document left out
that scores above the last one returned by more than the tolerance (ties
may come in either order).

Errors: a NOT_FOUND for a candidate list is expected, and counted apart,
when some version in the request's window lacks one of its candidates (the
writer deleted it, or the alias moved, while the request was in flight);
every other error fails the run. The writer stops the run at its first
error, because the model no longer knows what the server holds.

The run fails (exit status 1) unless: no unexpected error, no mismatch, no
lost answer (a request with neither a response nor an error) and no
duplicated one (a second response to a stream request_id, or one to an id
never sent); after the warm-up (the first ``--warmup`` of the run, at least
10 s) the medians of 10-second windows of RSS samples stay within
``--rss_tolerance`` of the lowest (see rss_report); the server logged at
least one compaction; every corpus holds the model's document count and the
alias its corpus at the end; the server exits 0 on SIGTERM; every /metrics
scrape is answered within SCRAPE_LIMIT_S; and, with the hostile mix, no
unexpected outcome and every expected one at least once (HOSTILE_COVERAGE).

Stubs: the ``maxsimd`` package of client/python with its generated stubs
(``MAXSIMD_STUBS_DIR``, as ctest sets it; see client/python/README.md).

    MAXSIMD_STUBS_DIR=build/tests/python/stubs \\
        python3 tests/soak/soak.py --server build/server/maxsimd --duration 600
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))

import grpc  # noqa: E402
import numpy as np  # noqa: E402

import maxsimd  # noqa: E402
from maxsimd._encode import encode_tensor, to_bfloat16_bits  # noqa: E402
from maxsimd._pb import admin_pb2, admin_pb2_grpc  # noqa: E402
from maxsimd._pb import reranker_pb2, reranker_pb2_grpc  # noqa: E402
from maxsimd.errors import from_status_code  # noqa: E402


@dataclass(frozen=True)
class CorpusSpec:
    dim: int
    storage: str  # "float16" or "bfloat16"
    normalize: bool
    docs: int  # live documents, about: see tokens
    max_doc_tokens: int
    scans: bool  # queried by scans and snapshot checks, or by candidates only

    @property
    def tokens(self) -> int:
        """Live tokens the writer holds the corpus at (within one write):
        `docs` documents of the mean length. Holding the data, rather than
        the document count, steady keeps the bytes the server must hold
        steady too."""
        return self.docs * (self.max_doc_tokens + 1) // 2


# soak_a and soak_b share a dim, so that queries against the alias are valid
# whichever of them it names; they store different dtypes, so that a query
# answered from the wrong one also scores differently. They and soak_n are
# small (about 1 MiB each) so that scans and their references stay cheap and
# every write changes a good share of them.
#
# soak_big is the resident data of a real deployment: about 50 MiB, ranked
# by candidate lists (a rerank's cost is its candidates' bytes), written to
# like the others. Without it the server's RSS is some 30 MiB, mostly code
# and allocator slack, whose transient swings (2 to 3% around the mean,
# measured over 10 minutes) leave no margin under the 5% flatness limit.
CORPORA: Dict[str, CorpusSpec] = {
    "soak_a": CorpusSpec(dim=64, storage="float16", normalize=False,
                         docs=300, max_doc_tokens=40, scans=True),
    "soak_b": CorpusSpec(dim=64, storage="bfloat16", normalize=False,
                         docs=300, max_doc_tokens=40, scans=True),
    "soak_n": CorpusSpec(dim=32, storage="float16", normalize=True,
                         docs=300, max_doc_tokens=40, scans=True),
    "soak_big": CorpusSpec(dim=128, storage="float16", normalize=False,
                           docs=2000, max_doc_tokens=200, scans=False),
}
ALIAS = "soak_live"
ALIAS_TARGETS = ("soak_a", "soak_b")
QUERY_NAMES = tuple(CORPORA) + (ALIAS,)

# Scores: fp32 sums of products of identically rounded inputs on both sides
# (the reference in float64); only the summation order differs.
RTOL = 1e-3
ATOL = 1e-4
TOP_KS = (1, 5, 10, 32, 100, 4096)  # 4096 (the server's max) returns all
MAX_QUERY_TOKENS = 32
MAX_DOCS_PER_WRITE = 8
MAX_CANDIDATES = 64
MAX_BATCH = 8
STREAM_WINDOW = 16  # stream requests in flight at once
STREAM_LENGTH = 200  # requests per stream before it is closed
SNAPSHOT_PERIOD_S = 5.0
ALIAS_SWAP_SHARE = 0.1  # of the writer's steps
CALL_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 10
MIN_WARMUP_S = 10.0
RSS_WINDOW_S = 10  # seconds of RSS samples per median
MAX_EXAMPLES = 10  # mismatches and errors quoted in the report
SCRAPE_LIMIT_S = 1.0  # the longest a /metrics scrape may take

# The hostile mix (see Hostile). The server runs with these limits, short so
# that each is reached many times in a run; HOSTILE_SERVER_FLAGS passes them.
WRITE_IDLE_TIMEOUT_S = 3
MAX_WRITE_STREAMS = 8  # the writer's one stream + STALLED_STREAMS + room
HANDSHAKE_TIMEOUT_S = 2
METRICS_REQUEST_TIMEOUT_S = 5  # the server's default --metrics_request_timeout
HOSTILE_SERVER_FLAGS = (
    f"--write_idle_timeout={WRITE_IDLE_TIMEOUT_S}s",
    f"--max_write_streams={MAX_WRITE_STREAMS}",
    f"--grpc_handshake_timeout={HANDSHAKE_TIMEOUT_S}s",
)
STALLED_STREAMS = 4  # AddDocuments streams kept open, adding nothing more
TRICKLE_PERIOD_S = 1.0  # between the empty messages of a trickling stream
PROBE_PERIOD_S = 10.0  # between probes of --max_write_streams
PROBE_EXTRA = 3  # streams a probe opens past --max_write_streams
IDLE_SOCKETS = 20  # per port: connect and send nothing
SLOW_SOCKETS = 10  # per port: one byte every SLOW_BYTE_PERIOD_S
SLOW_BYTE_PERIOD_S = 2.0
GARBAGE_PERIOD_S = 0.2  # between garbage calls
# How much later than its limit the server may end a stalled stream or close
# a connection (the server checks idle streams every second; the machine may
# be loaded) before it counts as not ended.
HOSTILE_SLACK_S = 5.0
# Messages that are not valid protocol buffers of any type: a length-delimited
# field 1 that claims 127 bytes and has 2, a varint tag with no value, wire
# type 7, and an 11-byte varint.
GARBAGE = (b"\x0a\x7f\x01\x02", b"\x08", b"\x0f", b"\xff" * 10 + b"\x01")
GARBAGE_ADMIN_METHODS = ("CreateCorpus", "GetCorpus", "ListCorpora",
                         "DeleteDocuments", "DropCorpus", "SetAlias",
                         "SnapshotCorpus", "LoadCorpus")


# ----------------------------------------------------------------------------
# Stored values and the MaxSim reference


def unit_rows_like_server(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm as the server does (kernels/element.cc
    ScaleToUnitNorm): the squared norm summed in float64, its inverse square
    root rounded to float32, the product in float32. Zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norm2 = np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64))
    inv = np.ones_like(norm2)
    nonzero = norm2 > 0
    inv[nonzero] = 1.0 / np.sqrt(norm2[nonzero])
    return x * inv.astype(np.float32)[:, None]


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> dtype -> float32, rounded to nearest even."""
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    return (to_bfloat16_bits(x).astype(np.uint32) << 16).view(np.float32)


def stored_tokens(raw: np.ndarray, spec: CorpusSpec) -> np.ndarray:
    """A document's tokens as the server holds them, as float32."""
    x = unit_rows_like_server(raw) if spec.normalize else raw
    return round_to(np.asarray(x, dtype=np.float32), spec.storage)


def staged_query(sent: np.ndarray, spec: CorpusSpec,
                 backend: str) -> np.ndarray:
    """The query as the backend scores it, in float64: normalised for a
    corpus that normalises; on the GPU also rounded to the corpus's storage
    dtype (kernels/backend.h: the GPU stages queries in the corpus dtype)."""
    q = np.asarray(sent, dtype=np.float32)
    if spec.normalize:
        q = unit_rows_like_server(q)
    if backend == "gpu":
        q = round_to(q, spec.storage)
    return q.astype(np.float64)


def maxsim(query: np.ndarray, docs: Sequence[np.ndarray]) -> np.ndarray:
    """score(q, d) = sum over query rows of max over doc rows of <q, d>."""
    lengths = np.array([len(d) for d in docs])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    sims = np.concatenate(docs).astype(np.float64) @ query.T  # [T, Lq]
    return np.maximum.reduceat(sims, starts, axis=0).sum(axis=1)


def ranking_error(got_ids: Sequence[str], got_scores: Sequence[float],
                  pool: Sequence[int], ref: Dict[int, float],
                  top_k: int) -> Optional[str]:
    """None if (got_ids, got_scores) is a correct top_k of `pool` scored by
    `ref` (tie-tolerant), else what is wrong."""
    k = min(top_k, len(pool))
    if len(got_ids) != k:
        return f"{len(got_ids)} results, reference has {k}"
    try:
        ids = [int(i) for i in got_ids]
    except ValueError:
        return f"non-integer id in {list(got_ids)[:5]}"
    if len(set(ids)) != k:
        return "an id returned twice"
    pool_set = set(pool)
    for doc_id, score in zip(ids, got_scores):
        if doc_id not in pool_set:
            return f"id {doc_id} not in the pool"
        want = ref[doc_id]
        if abs(score - want) > ATOL + RTOL * abs(want):
            return f"id {doc_id} scored {score}, reference {want}"
    if any(b > a for a, b in zip(got_scores, got_scores[1:])):
        return f"scores not in order: {list(got_scores)[:10]}"
    if k:
        floor = min(ref[i] for i in ids)
        returned = set(ids)
        for doc_id in pool:
            want = ref[doc_id]
            if doc_id not in returned and \
                    want > floor + ATOL + RTOL * abs(want):
                return f"id {doc_id} (reference {want}) left out"
    return None


# ----------------------------------------------------------------------------
# The model: versions of every corpus's live documents and the alias


@dataclass(frozen=True)
class State:
    """What the server holds at one version."""

    live: Dict[str, Tuple[int, ...]]  # corpus -> live ids, oldest first
    alias: str  # the corpus ALIAS names ("" before it is set)

    def resolve(self, name: str) -> str:
        return self.alias if name == ALIAS else name

    def with_live(self, corpus: str, ids: Tuple[int, ...]) -> "State":
        live = dict(self.live)
        live[corpus] = ids
        return State(live, self.alias)


class Model:
    """Versions of the server's state, written by the writer thread only.

    Version v is the state after v acknowledged writes. Before each write
    the writer proposes the state v + 1 it will produce; a query thread pins
    the acknowledged version before it sends a request and reads the states
    from there to one past the acknowledged version after the answer. States
    below every pin, and documents deleted at or below it, are dropped.

    Thread-safety: every method takes the lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acked = 0
        self._states: Dict[int, State] = {
            0: State({name: () for name in CORPORA}, "")}
        self._low = 0  # the oldest version kept
        self._pins: collections.Counter = collections.Counter()
        self._docs: Dict[int, np.ndarray] = {}  # id -> stored tokens
        self._retired: collections.deque = collections.deque()  # (v, ids)

    def pin(self) -> Tuple[int, State]:
        """The acknowledged version and state, kept until unpin()."""
        with self._lock:
            self._pins[self._acked] += 1
            return self._acked, self._states[self._acked]

    def unpin(self, version: int) -> None:
        with self._lock:
            self._pins[version] -= 1
            if not self._pins[version]:
                del self._pins[version]

    def window(self, version: int) -> List[State]:
        """The states a request pinned at `version` may have seen, oldest
        first, if its answer came now."""
        with self._lock:
            return [self._states[v]
                    for v in range(version, self._acked + 2)
                    if v in self._states]

    def docs(self, ids: Sequence[int]) -> List[np.ndarray]:
        with self._lock:
            return [self._docs[i] for i in ids]

    def current(self) -> State:
        with self._lock:
            return self._states[self._acked]

    def propose(self, state: State, docs: Dict[int, np.ndarray]) -> None:
        with self._lock:
            self._states[self._acked + 1] = state
            self._docs.update(docs)

    def ack(self, deleted: Sequence[int] = ()) -> None:
        with self._lock:
            self._acked += 1
            if deleted:
                self._retired.append((self._acked, tuple(deleted)))
            low = min(self._pins) if self._pins else self._acked
            while self._low < low:
                del self._states[self._low]
                self._low += 1
            # A document deleted at version d is in no state from d on.
            while self._retired and self._retired[0][0] <= low:
                for doc_id in self._retired.popleft()[1]:
                    del self._docs[doc_id]

    def abandon(self, added: Sequence[int]) -> None:
        """Forgets the proposed state of a write that failed."""
        with self._lock:
            del self._states[self._acked + 1]
            for doc_id in added:
                del self._docs[doc_id]


# ----------------------------------------------------------------------------
# Counters


@dataclass
class Stats:
    """What every thread counts. Thread-safety: every method takes the
    lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: collections.Counter = field(default_factory=collections.Counter)
    answered: collections.Counter = field(
        default_factory=collections.Counter)
    checked: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)
    expected: collections.Counter = field(
        default_factory=collections.Counter)
    mismatches: int = 0
    lost: int = 0
    duplicated: int = 0
    examples: List[str] = field(default_factory=list)

    def add(self, counter: str, key: object, n: int = 1) -> None:
        with self.lock:
            getattr(self, counter)[key] += n

    def bump(self, what: str, n: int = 1, example: str = "") -> None:
        """Adds n to mismatches, lost or duplicated, quoting an example."""
        with self.lock:
            setattr(self, what, getattr(self, what) + n)
            if example and len(self.examples) < MAX_EXAMPLES:
                self.examples.append(f"{what}: {example}")

    def error(self, rpc: str, code: grpc.StatusCode, details: str) -> None:
        with self.lock:
            self.errors[(rpc, code.name)] += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(f"{rpc} {code.name}: {details}")


# ----------------------------------------------------------------------------
# Queries


@dataclass
class Request:
    """One query as sent, with the version pinned before it was."""

    corpus: str  # corpus or alias
    query: np.ndarray  # [Lq, dim] as sent (float32 or float16)
    candidates: Optional[List[int]]  # None: a scan
    top_k: int
    request_id: str
    version: int

    def to_proto(self) -> reranker_pb2.RerankRequest:
        request = reranker_pb2.RerankRequest(
            corpus=self.corpus, query=encode_tensor(self.query, "query"),
            top_k=self.top_k, request_id=self.request_id)
        if self.candidates is not None:
            request.candidate_ids.extend(str(i) for i in self.candidates)
        return request


class Checker:
    """Builds queries from a pinned state and checks answers against the
    model. Thread-safe (the model is)."""

    def __init__(self, model: Model, stats: Stats, backend: str) -> None:
        self.model = model
        self.stats = stats
        self.backend = backend

    def make_request(self, rng: np.random.Generator, version: int,
                     state: State, request_id: str,
                     corpus: Optional[str] = None) -> Request:
        """A query near a random live document of a random corpus (or of
        `corpus`), half of them (all, on a corpus without scans) with a
        candidate list drawn from the newest two thirds of the corpus (the
        writer deletes the oldest)."""
        name = corpus or QUERY_NAMES[int(rng.integers(len(QUERY_NAMES)))]
        live = state.live[state.resolve(name)]
        spec = CORPORA[state.resolve(name)]
        (doc,) = self.model.docs([live[int(rng.integers(len(live)))]])
        lq = int(rng.integers(1, MAX_QUERY_TOKENS + 1))
        q = doc[rng.integers(0, len(doc), size=lq)] + \
            0.5 * rng.standard_normal((lq, spec.dim)) / np.sqrt(spec.dim)
        q = q.astype(np.float32)
        if spec.normalize:  # any scale: the server normalises
            q *= np.float32(rng.lognormal(0.0, 1.0))
        if rng.random() < 0.25:
            q = q.astype(np.float16)
        candidates = None
        if not spec.scans or rng.random() < 0.5:
            recent = live[len(live) // 3:]
            count = int(rng.integers(1, min(MAX_CANDIDATES, len(recent)) + 1))
            candidates = [int(i) for i in
                          rng.choice(recent, size=count, replace=False)]
        top_k = int(TOP_KS[int(rng.integers(len(TOP_KS)))])
        return Request(name, q, candidates, top_k, request_id, version)

    def check_response(self, rpc: str, request: Request,
                       response: reranker_pb2.RerankResponse) -> None:
        self.check_answer(rpc, request, response.request_id,
                          [d.id for d in response.results],
                          [d.score for d in response.results])

    def check_answer(self, rpc: str, request: Request, request_id: str,
                     got_ids: Sequence[str],
                     got_scores: Sequence[float]) -> None:
        """Counts a mismatch unless the answer equals the reference of a
        version in the request's window."""
        self.stats.add("checked", rpc)
        if request_id != request.request_id:
            self.stats.bump("mismatches", example=(
                f"{rpc} {request.request_id!r} answered as {request_id!r}"))
            return
        window = self.model.window(request.version)
        cache: Dict[str, Dict[int, float]] = {}
        reasons = []
        for offset, state in enumerate(window):
            target = state.resolve(request.corpus)
            live = state.live[target]
            if request.candidates is None:
                pool = list(live)
            else:
                live_set = set(live)
                if not all(c in live_set for c in request.candidates):
                    reasons.append(f"v{request.version + offset}: "
                                   "a candidate is not live")
                    continue  # that version answers NOT_FOUND
                pool = request.candidates
            ref = cache.setdefault(target, {})
            missing = [i for i in pool if i not in ref]
            if missing:
                q = staged_query(request.query, CORPORA[target], self.backend)
                ref.update(zip(missing,
                               maxsim(q, self.model.docs(missing)).tolist()))
            reason = ranking_error(got_ids, got_scores, pool, ref,
                                   request.top_k)
            if reason is None:
                return
            reasons.append(f"v{request.version + offset} ({target}): "
                           f"{reason}")
        self.stats.bump("mismatches", example=(
            f"{rpc} {request.request_id} on {request.corpus} "
            f"(candidates {request.candidates is not None}, "
            f"top_k {request.top_k}): {'; '.join(reasons) or 'no state'}"))

    def candidate_went_missing(self, requests: Sequence[Request]) -> bool:
        """Whether a version in the window of one of the requests lacks one
        of its candidates: NOT_FOUND is then a correct answer."""
        for request in requests:
            if request.candidates is None:
                continue
            for state in self.model.window(request.version):
                live = set(state.live[state.resolve(request.corpus)])
                if not all(c in live for c in request.candidates):
                    return True
        return False

    def check_error(self, rpc: str, requests: Sequence[Request],
                    code: grpc.StatusCode, details: str) -> None:
        if code == grpc.StatusCode.NOT_FOUND and \
                self.candidate_went_missing(requests):
            self.stats.add("expected", (
                rpc, code.name, "candidate deleted or alias moved in flight"))
        else:
            self.stats.error(rpc, code, details)


class QueryWorker(threading.Thread):
    """Sends one kind of query in a loop on its own channel until `stop`."""

    def __init__(self, kind: str, index: int, target: str, checker: Checker,
                 seed: int, stop: threading.Event,
                 failures: List[str]) -> None:
        super().__init__(name=f"{kind}-{index}", daemon=True)
        self.kind = kind
        self.checker = checker
        self.model = checker.model
        self.stats = checker.stats
        self.rng = np.random.default_rng(seed)
        self.stop = stop
        self.failures = failures
        self.channel = grpc.insecure_channel(target)
        self.stub = reranker_pb2_grpc.RerankerStub(self.channel)
        self.serial = 0

    def next_id(self) -> str:
        self.serial += 1
        return f"{self.name}-{self.serial}"

    def run(self) -> None:
        step: Callable[[], None] = {"rerank": self.rerank,
                                    "batch": self.batch,
                                    "stream": self.stream}[self.kind]
        try:
            while not self.stop.is_set():
                step()
        except Exception:  # noqa: BLE001 - a bug of this script: fail
            self.failures.append(f"{self.name}: {traceback.format_exc()}")
            self.stop.set()
        finally:
            self.channel.close()

    def rerank(self) -> None:
        version, state = self.model.pin()
        try:
            request = self.checker.make_request(self.rng, version, state,
                                                self.next_id())
            self.stats.add("sent", "Rerank")
            try:
                response = self.stub.Rerank(request.to_proto(),
                                            timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                self.stats.add("answered", "Rerank")
                self.checker.check_error("Rerank", [request], e.code(),
                                         e.details())
                return
            self.stats.add("answered", "Rerank")
            self.checker.check_response("Rerank", request, response)
        finally:
            self.model.unpin(version)

    def batch(self) -> None:
        version, state = self.model.pin()
        try:
            requests = [self.checker.make_request(self.rng, version, state,
                                                  self.next_id())
                        for _ in range(int(self.rng.integers(1,
                                                             MAX_BATCH + 1)))]
            message = reranker_pb2.RerankBatchRequest(
                queries=[r.to_proto() for r in requests])
            self.stats.add("sent", "RerankBatch")
            self.stats.add("sent", "RerankBatch queries", len(requests))
            try:
                response = self.stub.RerankBatch(message,
                                                 timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                self.stats.add("answered", "RerankBatch")
                self.stats.add("answered", "RerankBatch queries",
                               len(requests))
                self.checker.check_error("RerankBatch", requests, e.code(),
                                         e.details())
                return
            self.stats.add("answered", "RerankBatch")
            results = list(response.results)
            self.stats.add("answered", "RerankBatch queries",
                           min(len(results), len(requests)))
            if len(results) < len(requests):
                self.stats.bump("lost", len(requests) - len(results),
                                f"RerankBatch of {len(requests)} answered "
                                f"{len(results)}")
            elif len(results) > len(requests):
                self.stats.bump("duplicated", len(results) - len(requests),
                                f"RerankBatch of {len(requests)} answered "
                                f"{len(results)}")
            for request, result in zip(requests, results):
                self.checker.check_response("RerankBatch queries", request,
                                            result)
        finally:
            self.model.unpin(version)

    def stream(self) -> None:
        """One RerankStream of up to STREAM_LENGTH requests, at most
        STREAM_WINDOW in flight; every request_id must be answered once."""
        outstanding: Dict[str, Request] = {}
        answered: set = set()
        lock = threading.Lock()
        window = threading.Semaphore(STREAM_WINDOW)

        def requests():
            # Runs on a gRPC thread; `outstanding` is shared with the reader.
            for _ in range(STREAM_LENGTH):
                while not window.acquire(timeout=0.1):
                    if self.stop.is_set():
                        return
                if self.stop.is_set():
                    return
                version, state = self.model.pin()
                request = self.checker.make_request(self.rng, version, state,
                                                    self.next_id())
                with lock:
                    outstanding[request.request_id] = request
                self.stats.add("sent", "RerankStream")
                yield request.to_proto()

        self.stats.add("sent", "RerankStream streams")
        try:
            for response in self.stub.RerankStream(
                    requests(), timeout=CALL_TIMEOUT_S * STREAM_LENGTH):
                with lock:
                    request = outstanding.pop(response.request_id, None)
                if request is None:
                    again = response.request_id in answered
                    self.stats.bump("duplicated", example=(
                        f"RerankStream answered {response.request_id!r} "
                        f"{'again' if again else 'but it was never sent'}"))
                    continue
                window.release()
                answered.add(request.request_id)
                self.stats.add("answered", "RerankStream")
                try:
                    if response.status_code:
                        error = from_status_code(
                            response.status_code, response.status_message,
                            method="RerankStream")
                        self.checker.check_error("RerankStream", [request],
                                                 error.code, error.details)
                    else:
                        self.checker.check_response("RerankStream", request,
                                                    response)
                finally:
                    self.model.unpin(request.version)
            self.stats.add("answered", "RerankStream streams")
            ended_ok = True
        except grpc.RpcError as e:
            self.stats.add("answered", "RerankStream streams")
            self.stats.error("RerankStream streams", e.code(), e.details())
            ended_ok = False
        with lock:
            left = list(outstanding.values())
            outstanding.clear()
        for request in left:
            self.model.unpin(request.version)
        if left and ended_ok:
            self.stats.bump("lost", len(left), (
                f"RerankStream ended OK without answering "
                f"{[r.request_id for r in left][:5]}"))
        elif left:
            # Answered by the stream's own error status.
            self.stats.add("answered", "RerankStream", len(left))


# ----------------------------------------------------------------------------
# The writer


def refused_at_stream_limit(code: grpc.StatusCode, details: str) -> bool:
    """Whether an AddDocuments error is the server's refusal of a stream past
    --max_write_streams."""
    return code == grpc.StatusCode.RESOURCE_EXHAUSTED and \
        "--max_write_streams" in details


class WriteGate:
    """Keeps the soak's AddDocuments streams from opening while a probe of
    --max_write_streams holds the server's stream slots (WriteLimitProbe),
    so that the writer is not refused for the probe's sake.

    A stream's call runs inside stream(); a probe inside probe(), which
    waits for the calls in stream() to end and holds new ones until it is
    done. The server frees a slot when it has processed the end of a stream,
    a little after the client sees it: a stream opened just after a probe may
    still be refused, and refusal_expected() says so.

    Thread-safety: every method may be called from any thread.
    """

    GRACE_S = 2.0  # after a probe, refusals still count as the probe's

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._users = 0
        self._probing = False
        self._probe_end = -float("inf")

    @contextlib.contextmanager
    def stream(self):
        with self._cv:
            while self._probing:
                self._cv.wait()
            self._users += 1
        try:
            yield
        finally:
            with self._cv:
                self._users -= 1
                self._cv.notify_all()

    @contextlib.contextmanager
    def probe(self):
        with self._cv:
            self._probing = True
            while self._users:
                self._cv.wait()
        try:
            yield
        finally:
            with self._cv:
                self._probing = False
                self._probe_end = time.monotonic()
                self._cv.notify_all()

    def refusal_expected(self, opened: float) -> bool:
        """Whether a refusal at --max_write_streams of a stream opened at
        `opened` (time.monotonic()) may be a probe's doing: a probe is under
        way, or ended less than GRACE_S before the stream was opened."""
        with self._cv:
            return self._probing or self._probe_end > opened - self.GRACE_S


class Writer:
    """The only writer: every write goes through the model (propose, then
    ack on success). Runs setup on the caller's thread, then `run` on its
    own."""

    def __init__(self, client: maxsimd.Client, checker: Checker,
                 files_dir: Path, writes_per_second: float,
                 seed: int, gate: WriteGate) -> None:
        self.client = client
        self.gate = gate
        self.checker = checker
        self.model = checker.model
        self.stats = checker.stats
        self.files_dir = files_dir
        self.period = 1.0 / writes_per_second
        self.rng = np.random.default_rng(seed)
        self.next_id = 1
        self.snapshots = 0
        self.acked: collections.Counter = collections.Counter()
        self.tokens: collections.Counter = collections.Counter()  # live

    def _call(self, rpc: str, call: Callable[[], object]) -> object:
        """Runs one admin call, counting it; errors propagate."""
        self.stats.add("sent", rpc)
        try:
            result = call()
        except maxsimd.MaxsimdError as e:
            self.stats.add("answered", rpc)
            self.stats.error(rpc, e.code, e.details)
            raise
        self.stats.add("answered", rpc)
        return result

    def _write(self, rpc: str, state: State, call: Callable[[], object],
               added: Optional[Dict[int, np.ndarray]] = None,
               deleted: Sequence[int] = ()) -> object:
        added = added or {}
        self.model.propose(state, added)
        try:
            result = self._call(rpc, call)
        except maxsimd.MaxsimdError:
            self.model.abandon(list(added))
            raise
        self.model.ack(deleted)
        self.acked[rpc] += 1
        return result

    def setup(self) -> None:
        for name, spec in CORPORA.items():
            self._call("CreateCorpus", lambda: self.client.create_corpus(
                name, spec.dim, normalize=spec.normalize,
                storage_dtype=spec.storage))
            # Filled by the writes of the load, so that the corpus starts
            # with the segments it will have (no large first segment for
            # compaction to take apart during the run).
            while self.tokens[name] < spec.tokens:
                self.add(name)
        self.swap_alias()

    def add(self, corpus: str) -> None:
        spec = CORPORA[corpus]
        count = int(self.rng.integers(1, MAX_DOCS_PER_WRITE + 1))
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        raw = []
        for _ in ids:
            rows = self.rng.standard_normal(
                (int(self.rng.integers(1, spec.max_doc_tokens + 1)),
                 spec.dim))
            if spec.normalize:  # rows of any norm: the server normalises
                rows *= self.rng.lognormal(0.0, 1.0, size=(len(rows), 1))
            else:
                rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            raw.append(rows.astype(np.float32))
        state = self.model.current()
        response = self._write(
            "AddDocuments", state.with_live(corpus,
                                            state.live[corpus] + tuple(ids)),
            lambda: self._add_call(corpus, ids, raw),
            added={i: stored_tokens(r, spec) for i, r in zip(ids, raw)})
        if response.added != count:
            raise AssertionError(f"AddDocuments of {count} added "
                                 f"{response.added}")
        self.tokens[corpus] += sum(len(r) for r in raw)

    def _add_call(self, corpus: str, ids: Sequence[int],
                  raw: Sequence[np.ndarray]) -> object:
        """AddDocuments through the gate; a refusal at --max_write_streams
        that a probe explains (nothing was added) is counted as expected and
        retried."""
        while True:
            opened = time.monotonic()
            with self.gate.stream():
                try:
                    return self.client.add_documents(corpus, ids, raw,
                                                     timeout=CALL_TIMEOUT_S)
                except maxsimd.MaxsimdError as e:
                    if not refused_at_stream_limit(e.code, e.details) or \
                            not self.gate.refusal_expected(opened):
                        raise
                    self.stats.add("expected", (
                        "AddDocuments", e.code.name,
                        "refused at --max_write_streams just after a probe; "
                        "retried"))
            time.sleep(0.05)

    def delete(self, corpus: str) -> None:
        live = self.model.current().live[corpus]
        count = int(self.rng.integers(1, MAX_DOCS_PER_WRITE + 1))
        ids = list(live[:count])
        tokens = sum(len(d) for d in self.model.docs(ids))
        response = self._write(
            "DeleteDocuments",
            self.model.current().with_live(corpus, live[count:]),
            lambda: self.client.delete_documents(corpus, ids,
                                                 timeout=CALL_TIMEOUT_S),
            deleted=ids)
        if response.deleted != count or response.missing:
            raise AssertionError(
                f"DeleteDocuments of {count} deleted {response.deleted}, "
                f"missing {response.missing}")
        self.tokens[corpus] -= tokens

    def swap_alias(self) -> None:
        state = self.model.current()
        other = ALIAS_TARGETS[1] if state.alias == ALIAS_TARGETS[0] \
            else ALIAS_TARGETS[0]
        self._write("SetAlias", State(state.live, other),
                    lambda: self.client.set_alias(ALIAS, other,
                                                  timeout=CALL_TIMEOUT_S))

    def snapshot_check(self) -> None:
        """Snapshots a corpus, loads the snapshot as a new corpus, checks a
        scan of every document of the copy against the model, drops it."""
        self.snapshots += 1
        scanned = [name for name, spec in CORPORA.items() if spec.scans]
        corpus = scanned[self.snapshots % len(scanned)]
        path = f"snapshot-{self.snapshots}"
        copy = f"soak_copy_{self.snapshots}"
        state = self.model.current()
        live = state.live[corpus]
        pinned, _ = self.model.pin()  # keeps `state`'s documents
        try:
            num = self._call("SnapshotCorpus", lambda: self.client.
                             snapshot_corpus(corpus, path,
                                             timeout=CALL_TIMEOUT_S))
            if num != len(live):
                raise AssertionError(f"snapshot of {corpus} holds {num} "
                                     f"documents, the model {len(live)}")
            self._call("LoadCorpus", lambda: self.client.load_corpus(
                path, copy, timeout=CALL_TIMEOUT_S))
            request = self.checker.make_request(
                self.rng, pinned, state, f"copy-{self.snapshots}", corpus)
            request.candidates = None
            request.top_k = len(live)
            result = self._call(
                "Rerank (snapshot copies)", lambda: self.client.rerank(
                    copy, request.query, top_k=request.top_k,
                    request_id=request.request_id, timeout=CALL_TIMEOUT_S))
            self.checker.check_answer("Rerank (snapshot copies)", request,
                                      result.request_id, result.str_ids,
                                      result.scores.tolist())
            self._call("DropCorpus", lambda: self.client.drop_corpus(
                copy, timeout=CALL_TIMEOUT_S))
        finally:
            self.model.unpin(pinned)
        shutil.rmtree(self.files_dir / path)

    def step(self, next_snapshot: float) -> float:
        """One write; returns when the next snapshot check is due."""
        now = time.monotonic()
        if now >= next_snapshot:
            self.snapshot_check()
            return now + SNAPSHOT_PERIOD_S
        if self.rng.random() < ALIAS_SWAP_SHARE:
            self.swap_alias()
            return next_snapshot
        corpus = list(CORPORA)[int(self.rng.integers(len(CORPORA)))]
        # Never below a handful of documents, so that candidate lists can
        # be drawn.
        if self.tokens[corpus] < CORPORA[corpus].tokens or len(
                self.model.current().live[corpus]) <= 2 * MAX_DOCS_PER_WRITE:
            self.add(corpus)
        else:
            self.delete(corpus)
        return next_snapshot

    def run(self, stop: threading.Event, failures: List[str]) -> None:
        next_snapshot = time.monotonic() + SNAPSHOT_PERIOD_S
        next_write = time.monotonic()
        try:
            while not stop.is_set():
                next_snapshot = self.step(next_snapshot)
                # Behind schedule (slow writes), the next write is due now,
                # not in a burst that catches up.
                next_write = max(next_write + self.period, time.monotonic())
                stop.wait(max(0.0, next_write - time.monotonic()))
        except maxsimd.MaxsimdError as e:
            failures.append(f"writer stopped the run: {e.method} "
                            f"{e.code.name}: {e.details}")
            stop.set()
        except Exception:  # noqa: BLE001 - a check or a bug: fail
            failures.append(f"writer: {traceback.format_exc()}")
            stop.set()


# ----------------------------------------------------------------------------
# The hostile mix


class HostileStats:
    """Outcomes of the hostile mix's actions: expected ones by (action,
    outcome), unexpected ones apart with examples, and distributions (times
    in seconds, counts). Thread-safety: every method takes the lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: collections.Counter = collections.Counter()
        self.unexpected: collections.Counter = collections.Counter()
        self.values: Dict[str, List[float]] = collections.defaultdict(list)
        self.examples: List[str] = []

    def ok(self, action: str, outcome: str, n: int = 1) -> None:
        with self.lock:
            self.outcomes[(action, outcome)] += n

    def bad(self, action: str, outcome: str, example: str) -> None:
        with self.lock:
            self.unexpected[(action, outcome)] += 1
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(f"{action}: {outcome}: {example}")

    def value(self, name: str, value: float) -> None:
        with self.lock:
            self.values[name].append(value)

    def count(self, action: str, outcome: str) -> int:
        with self.lock:
            return self.outcomes[(action, outcome)]

    def report(self) -> Dict:
        with self.lock:
            actions: Dict[str, Dict[str, int]] = collections.defaultdict(dict)
            for (action, outcome), n in sorted(self.outcomes.items()):
                actions[action][outcome] = n
            return {
                "actions": dict(actions),
                "unexpected": {f"{action}: {outcome}": n for
                               (action, outcome), n in
                               sorted(self.unexpected.items())},
                "distributions": {
                    name: {"n": len(v), "min": float(min(v)),
                           "median": float(np.median(v)),
                           "max": float(max(v))}
                    for name, v in sorted(self.values.items()) if v},
                "examples": list(self.examples),
            }


# Action names, as the report gives them.
STALLED = "stalled AddDocuments streams"
PROBE = "--max_write_streams probes"
MIXED_STREAM = "RerankStream [valid, garbage, valid]"
GARBAGE_ADD = "AddDocuments [valid, garbage]"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n"


class HostileDocs:
    """Documents for the hostile AddDocuments streams: valid for a random
    modelled corpus, with ids ("hostile-N") the writer never uses, so that a
    commit of any of them (there must be none) shows up in the checked
    answers ("non-integer id") and in the final document counts.
    Thread-safety: next_ids takes the lock; messages is called with a
    thread's own generator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def next_ids(self, n: int) -> List[str]:
        with self._lock:
            first = self._next
            self._next += n
        return [f"hostile-{i}" for i in range(first, first + n)]

    def messages(self, rng: np.random.Generator,
                 count: int) -> List[admin_pb2.AddDocumentsRequest]:
        """`count` AddDocuments messages of 1 to 3 documents each, the first
        naming the corpus."""
        corpus = list(CORPORA)[int(rng.integers(len(CORPORA)))]
        spec = CORPORA[corpus]
        messages = []
        for i in range(count):
            ids = self.next_ids(int(rng.integers(1, 4)))
            rows = [rng.standard_normal(
                (int(rng.integers(1, spec.max_doc_tokens + 1)), spec.dim))
                .astype(np.float32) for _ in ids]
            messages.append(admin_pb2.AddDocumentsRequest(
                corpus=corpus if i == 0 else "", ids=ids,
                token_counts=[len(r) for r in rows],
                tokens=encode_tensor(np.concatenate(rows), "tokens")))
        return messages


class SilentStream:
    """An AddDocuments stream that sends its messages, then adds nothing
    more until the call ends (the server ends it, or cancel()): it sends
    nothing, or with `trickle` an empty message (no documents) every
    TRICKLE_PERIOD_S, which must not keep it open. Times are
    time.monotonic()."""

    def __init__(self, stub: admin_pb2_grpc.AdminStub,
                 messages: Sequence[admin_pb2.AddDocumentsRequest],
                 trickle: bool = False) -> None:
        self.opened = time.monotonic()
        self.sent = len(messages)  # messages adding documents
        self.yielded = 0  # every message handed to gRPC
        self.last_sent = self.opened  # of a message adding documents
        self.ended = 0.0
        self.trickle = trickle
        self._release = threading.Event()

        def requests():
            # Runs on a gRPC thread until the call ends.
            for message in messages:
                self.last_sent = time.monotonic()
                self.yielded += 1
                yield message
            while trickle and not self._release.wait(TRICKLE_PERIOD_S):
                self.yielded += 1
                yield admin_pb2.AddDocumentsRequest()
            self._release.wait()

        self.future = stub.AddDocuments.future(requests(),
                                               timeout=CALL_TIMEOUT_S)
        self.future.add_done_callback(self._done)

    def _done(self, _) -> None:
        self.ended = time.monotonic()
        self._release.set()

    def done(self) -> bool:
        return self.future.done()

    def status(self) -> Tuple[grpc.StatusCode, str]:
        """The call's end; OK (a commit) too. REQUIRES: done()."""
        error = self.future.exception()
        if error is None:
            return grpc.StatusCode.OK, ""
        return error.code(), error.details() or ""

    def cancel(self) -> bool:
        """Cancels the call; False if it had already ended."""
        cancelled = self.future.cancel()
        self._release.set()
        return cancelled


class HostileThread(threading.Thread):
    """A thread of the hostile mix: step() in a loop until `stop`; a bug of
    this script fails the run."""

    def __init__(self, name: str, stats: HostileStats, stop: threading.Event,
                 failures: List[str]) -> None:
        super().__init__(name=name, daemon=True)
        self.stats = stats
        self.stop = stop
        self.failures = failures

    def run(self) -> None:
        try:
            self.loop()
        except Exception:  # noqa: BLE001 - a bug of this script: fail
            self.failures.append(f"{self.name}: {traceback.format_exc()}")
            self.stop.set()

    def loop(self) -> None:
        raise NotImplementedError


class StalledWrites(HostileThread):
    """Keeps STALLED_STREAMS AddDocuments streams open on the modelled
    corpora, each sending one or two messages of documents and then nothing
    (even slots) or an empty message every TRICKLE_PERIOD_S (odd slots). The
    server must end each with DEADLINE_EXCEEDED naming --write_idle_timeout
    and the messages it read, between WRITE_IDLE_TIMEOUT_S and 1.25 of it
    plus a second (and HOSTILE_SLACK_S) after its last message of
    documents, adding nothing; then it is reopened. A refusal at
    --max_write_streams is expected only around a probe (WriteGate)."""

    def __init__(self, target: str, docs: HostileDocs, gate: WriteGate,
                 seed: int, stats: HostileStats, stop: threading.Event,
                 failures: List[str]) -> None:
        super().__init__("stalled-writes", stats, stop, failures)
        self.channel = grpc.insecure_channel(target)
        self.stub = admin_pb2_grpc.AdminStub(self.channel)
        self.docs = docs
        self.gate = gate
        self.rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._open: List[SilentStream] = []

    def open_streams(self) -> List[SilentStream]:
        """The streams open now (as far as the client knows)."""
        with self._lock:
            return [s for s in self._open if not s.done()]

    def loop(self) -> None:
        streams: List[Optional[SilentStream]] = [None] * STALLED_STREAMS
        # Staggered, so that the streams do not all end and reopen at once.
        first = [time.monotonic() + i * WRITE_IDLE_TIMEOUT_S / STALLED_STREAMS
                 for i in range(STALLED_STREAMS)]
        try:
            while not self.stop.is_set():
                for i, stream in enumerate(streams):
                    if stream is None and time.monotonic() < first[i]:
                        continue
                    if stream is not None and not stream.done():
                        continue
                    if stream is not None:
                        self.judge(stream)
                    messages = self.docs.messages(
                        self.rng, int(self.rng.integers(1, 3)))
                    with self.gate.stream():
                        streams[i] = SilentStream(self.stub, messages,
                                                  trickle=i % 2 == 1)
                    self.stats.ok(STALLED, "opened")
                with self._lock:
                    self._open = [s for s in streams if s is not None]
                self.stop.wait(0.05)
        finally:
            for stream in streams:
                if stream is None:
                    continue
                if stream.cancel():
                    self.stats.ok(STALLED, "cancelled at the end of the run")
                else:
                    self.judge(stream)
            self.channel.close()

    def judge(self, stream: SilentStream) -> None:
        code, details = stream.status()
        read = re.search(r"after message (\d+)", details)
        kind = "sending empty messages" if stream.trickle else "silent"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and \
                "(--write_idle_timeout)" in details and \
                "nothing was added" in details and read and \
                stream.sent <= int(read.group(1)) <= stream.yielded:
            waited = stream.ended - stream.last_sent
            self.stats.value(f"{STALLED}, {kind}: last message of documents "
                             "to the end (s)", waited)
            latest = WRITE_IDLE_TIMEOUT_S * 1.25 + 1 + HOSTILE_SLACK_S
            if waited < WRITE_IDLE_TIMEOUT_S:
                self.stats.bad(STALLED, "ended before --write_idle_timeout",
                               f"{waited:.2f} s after its last message: "
                               f"{details}")
            elif waited > latest:
                self.stats.bad(STALLED, "ended late",
                               f"{waited:.2f} s after its last message "
                               f"(at most {latest:.2f}): {details}")
            else:
                self.stats.ok(STALLED, f"{kind}: ended by "
                              "--write_idle_timeout")
        elif refused_at_stream_limit(code, details) and \
                self.gate.refusal_expected(stream.opened):
            self.stats.ok(STALLED, "refused at --max_write_streams around a "
                          "probe")
        else:
            self.stats.bad(STALLED, f"{kind}: ended {code.name}",
                           f"{stream.sent} messages of documents, "
                           f"{stream.yielded} in all: {details}")


class WriteLimitProbe(HostileThread):
    """Every PROBE_PERIOD_S, with the soak's other AddDocuments streams held
    back (WriteGate), opens MAX_WRITE_STREAMS + PROBE_EXTRA streams at once,
    each sending one message. The server must refuse those past its limit
    with RESOURCE_EXHAUSTED naming --max_write_streams and the limit, before
    they are read, and accept the others; the accepted ones are cancelled
    (nothing of them is added).

    Checked: every stream is refused so, or still open when the refusals
    have come (accepted); at least one is accepted (the stalled streams
    leave room); and no more are accepted than the limit leaves beside the
    stalled streams that were surely open on the server throughout: opened
    half a second before the probe, and with their last message less than
    WRITE_IDLE_TIMEOUT_S before the probe's verdict (the server cannot have
    ended them earlier). A probe stream whose call the server has not
    started WAIT_S after it was opened would count as accepted: on a
    machine that slow, "accepted past --max_write_streams" can be wrong."""

    WAIT_S = 2.0  # for the refusals; under WRITE_IDLE_TIMEOUT_S

    def __init__(self, target: str, docs: HostileDocs, gate: WriteGate,
                 stalled: StalledWrites, seed: int, stats: HostileStats,
                 stop: threading.Event, failures: List[str]) -> None:
        super().__init__("write-limit-probe", stats, stop, failures)
        self.channel = grpc.insecure_channel(target)
        self.stub = admin_pb2_grpc.AdminStub(self.channel)
        self.docs = docs
        self.gate = gate
        self.stalled = stalled
        self.rng = np.random.default_rng(seed)

    def loop(self) -> None:
        try:
            while not self.stop.wait(PROBE_PERIOD_S):
                self.probe()
        finally:
            self.channel.close()

    def probe(self) -> None:
        with self.gate.probe():
            started = time.monotonic()
            # Stalled streams that reached the server before the probe's.
            before = [s for s in self.stalled.open_streams()
                      if s.opened < started - 0.5]

            def surely_open(now: float) -> List[SilentStream]:
                # The server ends a stream no sooner than
                # WRITE_IDLE_TIMEOUT_S after its last message.
                return [s for s in before
                        if s.last_sent + WRITE_IDLE_TIMEOUT_S > now]

            streams = [SilentStream(self.stub, self.docs.messages(self.rng, 1))
                       for _ in range(MAX_WRITE_STREAMS + PROBE_EXTRA)]
            self.stats.ok(PROBE, "probes")
            self.stats.ok(PROBE, "streams opened", len(streams))
            # Until the refusals have come for all the limit leaves out.
            while time.monotonic() < started + self.WAIT_S:
                most = MAX_WRITE_STREAMS - len(surely_open(time.monotonic()))
                if sum(1 for s in streams if not s.done()) <= most:
                    break
                time.sleep(0.02)
            time.sleep(0.2)  # refusals behind the ones waited for
            now = time.monotonic()
            accepted = [s for s in streams
                        if not s.done() or self.judge(s) == "accepted"]
            surely = surely_open(now)
            self.stats.value(f"{PROBE}: streams accepted of "
                             f"{len(streams)}", len(accepted))
            self.stats.value(f"{PROBE}: stalled streams surely open",
                             len(surely))
            if not accepted:
                self.stats.bad(PROBE, "no stream accepted",
                               f"{len(streams)} refused with at most "
                               f"{STALLED_STREAMS} stalled streams open")
            elif len(accepted) > MAX_WRITE_STREAMS - len(surely):
                self.stats.bad(PROBE, "accepted past --max_write_streams",
                               f"{len(accepted)} accepted beside "
                               f"{len(surely)} stalled streams open, limit "
                               f"{MAX_WRITE_STREAMS}")
            for stream in accepted:
                if stream.cancel():
                    self.stats.ok(PROBE, "accepted, cancelled by the client")
                elif stream.ended > now:  # ended since: not judged yet
                    self.judge(stream)
            # The server frees the slots when it has processed the cancels.
            time.sleep(0.3)

    def judge(self, stream: SilentStream) -> str:
        """Counts the end of a probe stream; "accepted" when the server had
        accepted it, else "refused" (or "unexpected")."""
        code, details = stream.status()
        if refused_at_stream_limit(code, details) and \
                str(MAX_WRITE_STREAMS) in details:
            self.stats.ok(PROBE, "refused, RESOURCE_EXHAUSTED naming "
                          "--max_write_streams")
            return "refused"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and \
                "(--write_idle_timeout)" in details:
            self.stats.ok(PROBE, "accepted, ended by --write_idle_timeout")
            return "accepted"
        self.stats.bad(PROBE, f"ended {code.name}", details)
        return "unexpected"


@dataclass
class RawConnection:
    """A TCP connection that never completes a request."""

    group: str  # the action's name in the report
    port: int
    payload: bytes  # sent one byte every SLOW_BYTE_PERIOD_S; b"": idle
    limit_s: float  # the server must close it within this (+ slack)
    sock: Optional[socket.socket] = None
    opened: float = 0.0
    next_byte: float = 0.0
    sent: int = 0
    overdue: bool = False
    retry_at: float = 0.0


class HostileConnections(HostileThread):
    """IDLE_SOCKETS connections that send nothing and SLOW_SOCKETS that send
    one byte every SLOW_BYTE_PERIOD_S (of an HTTP/2 preface, or of a
    /metrics request), to the gRPC port and to the metrics port each. The
    server must close each, the gRPC port within --grpc_handshake_timeout
    and the metrics port within --metrics_request_timeout (+ slack);
    closed, it is reopened. A failed connect is unexpected."""

    def __init__(self, grpc_port: int, metrics_port: int,
                 stats: HostileStats, stop: threading.Event,
                 failures: List[str]) -> None:
        super().__init__("hostile-connections", stats, stop, failures)
        self.connections = []
        for port, name, payload, limit_s in (
                (grpc_port, "gRPC port", H2_PREFACE, HANDSHAKE_TIMEOUT_S),
                (metrics_port, "metrics port", HTTP_REQUEST,
                 METRICS_REQUEST_TIMEOUT_S)):
            self.connections += [
                RawConnection(f"idle connections, {name}", port, b"",
                              limit_s) for _ in range(IDLE_SOCKETS)]
            self.connections += [
                RawConnection(f"slow connections, {name}", port, payload,
                              limit_s) for _ in range(SLOW_SOCKETS)]
        self.selector = selectors.DefaultSelector()

    def connect(self, c: RawConnection) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", c.port), timeout=5)
        except OSError as e:
            self.stats.bad(c.group, "connect failed", str(e))
            c.retry_at = time.monotonic() + 1.0
            return
        sock.setblocking(False)
        c.sock = sock
        c.opened = c.next_byte = time.monotonic()
        c.sent = 0
        c.overdue = False
        self.selector.register(sock, selectors.EVENT_READ, c)
        self.stats.ok(c.group, "connected")

    def close(self, c: RawConnection, how: str) -> None:
        """Records the server's close of `c` (`how`) and reconnects."""
        self.selector.unregister(c.sock)
        c.sock.close()
        c.sock = None
        self.stats.ok(c.group, how)
        self.stats.value(f"{c.group}: lifetime (s)",
                         time.monotonic() - c.opened)
        if not self.stop.is_set():
            self.connect(c)

    def loop(self) -> None:
        try:
            for c in self.connections:
                self.connect(c)
            while not self.stop.is_set():
                for key, _ in self.selector.select(0.1):
                    self.read(key.data)
                now = time.monotonic()
                for c in self.connections:
                    if c.sock is None:
                        if now >= c.retry_at:
                            self.connect(c)
                        continue
                    if c.payload and c.sent < len(c.payload) and \
                            now >= c.next_byte:
                        self.send_byte(c, now)
                    if c.sock is not None and not c.overdue and \
                            now - c.opened > c.limit_s + HOSTILE_SLACK_S:
                        c.overdue = True
                        self.stats.bad(c.group, "still open past the limit",
                                       f"open {now - c.opened:.1f} s, limit "
                                       f"{c.limit_s} s")
        finally:
            for c in self.connections:
                if c.sock is not None:
                    c.sock.close()
            self.selector.close()

    def read(self, c: RawConnection) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            self.close(c, "reset by the server")
            return
        except OSError as e:
            self.stats.bad(c.group, "read failed", str(e))
            self.close(c, "closed after a failed read")
            return
        if data:
            self.stats.ok(c.group, "bytes received", len(data))
        else:
            self.close(c, "closed by the server")

    def send_byte(self, c: RawConnection, now: float) -> None:
        try:
            c.sock.send(c.payload[c.sent:c.sent + 1])
        except (BlockingIOError, InterruptedError):
            return
        except (ConnectionResetError, BrokenPipeError):
            self.close(c, "reset by the server")
            return
        except OSError as e:
            self.stats.bad(c.group, "send failed", str(e))
            self.close(c, "closed after a failed send")
            return
        c.sent += 1
        c.next_byte = now + SLOW_BYTE_PERIOD_S
        self.stats.ok(c.group, "bytes sent")


class GarbageCalls(HostileThread):
    """Every GARBAGE_PERIOD_S, alternately: a unary call (Rerank,
    RerankBatch, or an Admin method of GARBAGE_ADMIN_METHODS, in turn) whose
    message is GARBAGE, which must fail INVALID_ARGUMENT naming the method
    and the message type; and either a RerankStream of [valid, garbage,
    valid], whose valid requests must be answered correctly (Checker, under
    "RerankStream (with garbage)") and whose garbage gets a response of its
    own with status_code 3 naming "RerankStream message 1", or an
    AddDocuments stream of [valid, garbage], which must fail
    INVALID_ARGUMENT naming "AddDocuments message 1", adding nothing."""

    RPC = "RerankStream (with garbage)"

    def __init__(self, target: str, checker: Checker, docs: HostileDocs,
                 gate: WriteGate, seed: int, stats: HostileStats,
                 stop: threading.Event, failures: List[str]) -> None:
        super().__init__("garbage", stats, stop, failures)
        self.checker = checker
        self.model = checker.model
        self.docs = docs
        self.gate = gate
        self.rng = np.random.default_rng(seed)
        self.channel = grpc.insecure_channel(target)
        # No serializers: the requests are bytes, sent as they are.
        self.unary = [(service, method, self.channel.unary_unary(
            f"/maxsimd.v1.{service}/{method}"))
            for service, method in
            [("Reranker", "Rerank"), ("Reranker", "RerankBatch")] +
            [("Admin", m) for m in GARBAGE_ADMIN_METHODS]]
        self.rerank_stream = self.channel.stream_stream(
            "/maxsimd.v1.Reranker/RerankStream",
            response_deserializer=reranker_pb2.RerankResponse.FromString)
        self.add_stream = self.channel.stream_unary(
            "/maxsimd.v1.Admin/AddDocuments")
        self.serial = 0

    def garbage(self) -> bytes:
        return GARBAGE[int(self.rng.integers(len(GARBAGE)))]

    def loop(self) -> None:
        step = 0
        try:
            while not self.stop.wait(GARBAGE_PERIOD_S):
                if step % 2 == 0:
                    self.garbage_unary(*self.unary[(step // 2) %
                                                   len(self.unary)])
                elif step % 4 == 1:
                    self.mixed_stream()
                else:
                    self.garbage_add()
                step += 1
        finally:
            self.channel.close()

    def garbage_unary(self, service: str, method: str, call) -> None:
        action = f"garbage {service}.{method}"
        want = (f"{service}.{method}: the message is not a valid "
                f"maxsimd.v1.{method}Request")
        try:
            call(self.garbage(), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT and \
                    want in (e.details() or ""):
                self.stats.ok(action, "INVALID_ARGUMENT naming the method")
            else:
                self.stats.bad(action, e.code().name, e.details())
            return
        self.stats.bad(action, "answered OK", "a garbage message parsed")

    def mixed_stream(self) -> None:
        version, state = self.model.pin()
        try:
            requests = {}
            for _ in range(2):
                self.serial += 1
                request = self.checker.make_request(
                    self.rng, version, state, f"garbage-stream-{self.serial}")
                requests[request.request_id] = request
            valid = [r.to_proto().SerializeToString()
                     for r in requests.values()]
            self.stats.ok(MIXED_STREAM, "streams")
            self.checker.stats.add("sent", self.RPC, len(requests))
            garbage_answers = 0
            try:
                for response in self.rerank_stream(
                        iter([valid[0], self.garbage(), valid[1]]),
                        timeout=CALL_TIMEOUT_S):
                    if response.request_id in requests:
                        self.answer(requests.pop(response.request_id),
                                    response)
                    elif response.status_code == 3 and \
                            "RerankStream message 1: the message is not a " \
                            "valid maxsimd.v1.RerankRequest" in \
                            response.status_message:
                        garbage_answers += 1
                    else:
                        self.stats.bad(MIXED_STREAM, "an unknown response", (
                            f"request_id {response.request_id!r}, "
                            f"status_code {response.status_code}: "
                            f"{response.status_message}"))
            except grpc.RpcError as e:
                self.stats.bad(MIXED_STREAM, f"stream ended {e.code().name}",
                               e.details())
                # Answered by the stream's status.
                self.checker.stats.add("answered", self.RPC, len(requests))
                return
            if requests:
                self.checker.stats.bump("lost", len(requests), (
                    f"{MIXED_STREAM} ended OK without answering "
                    f"{list(requests)}"))
            if garbage_answers == 1:
                self.stats.ok(MIXED_STREAM, "garbage answered with "
                              "status_code 3 naming message 1")
            else:
                self.stats.bad(MIXED_STREAM, "garbage not answered once",
                               f"{garbage_answers} answers")
        finally:
            self.model.unpin(version)

    def answer(self, request: Request,
               response: reranker_pb2.RerankResponse) -> None:
        self.checker.stats.add("answered", self.RPC)
        if response.status_code:
            error = from_status_code(response.status_code,
                                     response.status_message,
                                     method="RerankStream")
            self.checker.check_error(self.RPC, [request], error.code,
                                     error.details)
        else:
            self.checker.check_response(self.RPC, request, response)

    def garbage_add(self) -> None:
        message = self.docs.messages(self.rng, 1)[0]
        opened = time.monotonic()
        with self.gate.stream():
            try:
                self.add_stream(iter([message.SerializeToString(),
                                      self.garbage()]),
                                timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
                if code == grpc.StatusCode.INVALID_ARGUMENT and \
                        "AddDocuments message 1: the message is not a valid " \
                        "maxsimd.v1.AddDocumentsRequest" in details:
                    self.stats.ok(GARBAGE_ADD, "INVALID_ARGUMENT naming "
                                  "message 1")
                elif refused_at_stream_limit(code, details) and \
                        self.gate.refusal_expected(opened):
                    self.stats.ok(GARBAGE_ADD, "refused at "
                                  "--max_write_streams after a probe")
                else:
                    self.stats.bad(GARBAGE_ADD, code.name, details)
                return
        self.stats.bad(GARBAGE_ADD, "committed", "the stream ended OK")


# What a run with the hostile mix must have seen at least once: (action,
# outcome).
HOSTILE_COVERAGE = (
    [(STALLED, "silent: ended by --write_idle_timeout"),
     (STALLED, "sending empty messages: ended by --write_idle_timeout"),
     (PROBE, "refused, RESOURCE_EXHAUSTED naming --max_write_streams"),
     (PROBE, "accepted, cancelled by the client"),
     (MIXED_STREAM, "garbage answered with status_code 3 naming message 1"),
     (GARBAGE_ADD, "INVALID_ARGUMENT naming message 1")] +
    [(f"{kind} connections, {port}", "closed by the server")
     for kind in ("idle", "slow") for port in ("gRPC port", "metrics port")] +
    [(f"garbage {service}.{method}", "INVALID_ARGUMENT naming the method")
     for service, method in [("Reranker", "Rerank"),
                             ("Reranker", "RerankBatch")] +
     [("Admin", m) for m in GARBAGE_ADMIN_METHODS]])


def start_hostile(target: str, grpc_port: int, metrics_port: int,
                  checker: Checker, gate: WriteGate, seed: int,
                  stats: HostileStats, stop: threading.Event,
                  failures: List[str]) -> List[threading.Thread]:
    """The hostile mix's threads, not started."""
    docs = HostileDocs()
    stalled = StalledWrites(target, docs, gate, seed + 1, stats, stop,
                            failures)
    return [
        stalled,
        WriteLimitProbe(target, docs, gate, stalled, seed + 2, stats, stop,
                        failures),
        HostileConnections(grpc_port, metrics_port, stats, stop, failures),
        GarbageCalls(target, checker, docs, gate, seed + 3, stats, stop,
                     failures),
    ]


# ----------------------------------------------------------------------------
# The server and its memory


class Server:
    """The server binary as a child process, logging to a file."""

    def __init__(self, binary: str, backend: str, work: Path,
                 extra_flags: Sequence[str]) -> None:
        self.data_dir = work / "data"
        self.files_dir = work / "files"
        self.files_dir.mkdir()
        self.log_path = work / "server.log"
        self.metrics_url = ""  # known once it listens
        flags = [
            "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
            f"--data_dir={self.data_dir}", f"--files_dir={self.files_dir}",
            # Compaction all the time: every second, over segments sealed
            # at 256 KiB, so that small appends are merged and segments
            # that lose a quarter of their documents are rewritten.
            "--compaction_interval=1s", "--segment_seal_bytes=262144",
            "--compact_tombstone_ratio=0.25",
            f"--drain_timeout={DRAIN_TIMEOUT_S}s", "--log_level=info",
        ]
        if backend == "cpu":
            flags.append("--cpu")
        self.command = [binary, *flags, *extra_flags]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, stdout=log,
                                         stderr=subprocess.STDOUT)

    def wait_ports(self, timeout: float = 120.0) -> Tuple[int, int]:
        """The gRPC and metrics ports, from the "serving on port N, metrics
        on port M" log line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"serving on port (\d+), metrics on port (\d+)",
                              self.log())
            if match:
                self.metrics_url = \
                    f"http://127.0.0.1:{match.group(2)}/metrics"
                return int(match.group(1)), int(match.group(2))
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with status "
                                   f"{self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.1)
        raise RuntimeError(f"no 'serving on port' line within {timeout} s:\n"
                           f"{self.tail()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def memory(self) -> Optional[Dict[str, int]]:
        """VmRSS, RssAnon, RssFile and Threads from /proc, in KiB; None once
        the server exited."""
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in text.splitlines()
                      if ":" in line)
        try:
            return {key: int(fields[key].split()[0]) for key in
                    ("VmRSS", "RssAnon", "RssFile", "Threads")}
        except KeyError:  # a zombie: no memory lines
            return None

    def stored_kib(self) -> int:
        """The corpora's token storage, the sum of maxsimd_corpus_bytes from
        a scrape of /metrics, in KiB. A failed scrape raises OSError."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
            metrics = r.read().decode()
        return int(sum(float(v) for v in re.findall(
            r"^maxsimd_corpus_bytes\{[^}]*\} (\S+)$", metrics,
            re.MULTILINE)) / 1024)

    def terminate(self) -> int:
        """SIGTERM, then the exit status (SIGKILL past the drain)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DRAIN_TIMEOUT_S + 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Sampler(threading.Thread):
    """The server's memory once a second (Server.memory) with a scrape of
    /metrics (Server.stored_kib), from its start until `stop` or its exit.
    Every scrape's latency is recorded; a failed one is recorded and its
    sample dropped (a scrape under way when the run stops is not counted)."""

    def __init__(self, server: Server, stop: threading.Event) -> None:
        super().__init__(name="rss", daemon=True)
        self.server = server
        self.stop = stop
        self.samples: List[Tuple[float, Dict[str, int]]] = []
        self.start_time = time.monotonic()
        self.scrape_s: List[float] = []  # latencies of the scrapes answered
        self.scrape_failures: List[str] = []

    def run(self) -> None:
        while True:
            memory = self.server.memory()
            if memory is None:
                return
            began = time.monotonic()
            try:
                memory["Stored"] = self.server.stored_kib()
            except OSError as e:
                if not self.stop.is_set() and self.server.proc.poll() is None:
                    self.scrape_failures.append(
                        f"{began - self.start_time:.0f} s: "
                        f"{self.server.metrics_url}: {e}")
            else:
                self.scrape_s.append(time.monotonic() - began)
                self.samples.append((began - self.start_time, memory))
            if self.stop.wait(1.0):
                return

    def scrape_report(self) -> Dict:
        latencies = sorted(self.scrape_s)
        report = {
            "scrapes": len(latencies) + len(self.scrape_failures),
            "failed": len(self.scrape_failures),
            "over_limit": sum(1 for t in latencies if t > SCRAPE_LIMIT_S),
            "limit_s": SCRAPE_LIMIT_S,
            "failures": self.scrape_failures[:MAX_EXAMPLES],
        }
        if latencies:
            report.update({
                "median_s": float(np.median(latencies)),
                "p99_s": float(np.percentile(latencies, 99)),
                "max_s": latencies[-1]})
        return report


def rss_report(samples: Sequence[Tuple[float, Dict[str, int]]],
               warmup_s: float) -> Dict[str, float]:
    """VmRSS (MiB) after the warm-up.

    The flatness check is on its level, the median of each RSS_WINDOW_S
    window of samples: a transient allocation (a compaction's merged segment
    while readers still hold the old ones, a loaded snapshot copy, requests
    in flight; about 1 MiB on a 30 MiB server) comes and goes within a
    window, a leak stays. The raw samples' extremes and a least-squares
    slope are reported too.
    """
    after = [(t, m) for t, m in samples if t >= warmup_s]
    rss = [m["VmRSS"] / 1024 for _, m in after]
    times = [t for t, _ in after]
    windows: Dict[int, List[float]] = collections.defaultdict(list)
    for t, value in zip(times, rss):
        windows[int((t - warmup_s) // RSS_WINDOW_S)].append(value)
    # Whole windows only: the last one may have just begun.
    levels = [float(np.median(windows[w])) for w in sorted(windows)][:-1]
    if len(levels) < 2:
        return {}
    return {
        "warmup_s": warmup_s, "samples": len(after),
        "at_launch_mib": samples[0][1]["VmRSS"] / 1024,
        "start_mib": rss[0], "end_mib": rss[-1],
        "min_mib": min(rss), "max_mib": max(rss),
        "level_start_mib": levels[0], "level_end_mib": levels[-1],
        "level_min_mib": min(levels), "level_max_mib": max(levels),
        "spread": (max(levels) - min(levels)) / min(levels),
        "slope_mib_per_min": float(np.polyfit(times, rss, 1)[0] * 60),
        "anon_start_mib": after[0][1]["RssAnon"] / 1024,
        "anon_end_mib": after[-1][1]["RssAnon"] / 1024,
        "stored_start_mib": after[0][1]["Stored"] / 1024,
        "stored_end_mib": after[-1][1]["Stored"] / 1024,
        "threads_start": after[0][1]["Threads"],
        "threads_end": after[-1][1]["Threads"],
    }


# ----------------------------------------------------------------------------
# The run


def final_state_errors(client: maxsimd.Client, model: Model) -> List[str]:
    """Differences between the server's corpora and alias and the model's
    last acknowledged state."""
    state = model.current()
    errors = []
    for name in CORPORA:
        info = client.get_corpus(name)
        if info.num_documents != len(state.live[name]):
            errors.append(f"{name} holds {info.num_documents} documents, "
                          f"the model {len(state.live[name])}")
    alias = client.list_aliases().get(ALIAS)
    if alias != state.alias:
        errors.append(f"{ALIAS} names {alias!r}, the model {state.alias!r}")
    return errors


def errors_by_code(stats: Stats) -> Dict[str, int]:
    """Every error answer, expected or not, by status code."""
    codes: collections.Counter = collections.Counter()
    for (_, code), n in stats.errors.items():
        codes[code] += n
    for (_, code, _), n in stats.expected.items():
        codes[code] += n
    return dict(codes)


def print_report(report: Dict) -> None:
    stats = report["requests"]
    print(f"\nmaxsimd soak: {report['duration_s']:.0f} s of load on the "
          f"{report['backend']} backend, seed {report['seed']}")
    print(f"{'RPC':<28}{'sent':>10}{'answered':>10}{'checked':>10}")
    for rpc in sorted(stats):
        row = stats[rpc]
        print(f"  {rpc:<26}{row['sent']:>10}{row['answered']:>10}"
              f"{row['checked']:>10}")
    errors = report["errors_by_code"]
    print("errors by status code: " + (", ".join(
        f"{code} {n}" for code, n in sorted(errors.items())) or "none"))
    for key, n in sorted(report["unexpected_errors"].items()):
        print(f"  unexpected: {key} x{n}")
    for key, n in sorted(report["expected_errors"].items()):
        print(f"  expected: {key} x{n}")
    print(f"mismatches {report['mismatches']}, lost {report['lost']}, "
          f"duplicated {report['duplicated']}")
    print("writes acknowledged (setup included): " + ", ".join(
        f"{rpc} {n}" for rpc, n in sorted(report["writes_acked"].items())) +
        f"; snapshot checks {report['snapshot_checks']}; compactions logged "
        f"{report['compactions_logged']}")
    rss = report["rss"]
    if rss:
        print(f"RSS (MiB): {rss['at_launch_mib']:.1f} at launch; after the "
              f"{rss['warmup_s']:.0f} s warm-up, samples start "
              f"{rss['start_mib']:.1f}, end {rss['end_mib']:.1f}, min "
              f"{rss['min_mib']:.1f}, max {rss['max_mib']:.1f}; "
              f"{RSS_WINDOW_S} s medians start {rss['level_start_mib']:.1f}, "
              f"end {rss['level_end_mib']:.1f}, min "
              f"{rss['level_min_mib']:.1f}, max {rss['level_max_mib']:.1f}, "
              f"spread {100 * rss['spread']:.2f}% (limit "
              f"{100 * report['rss_tolerance']:.0f}%); slope "
              f"{rss['slope_mib_per_min']:+.3f} MiB/min; anonymous "
              f"{rss['anon_start_mib']:.1f} -> {rss['anon_end_mib']:.1f}; "
              f"corpus storage {rss['stored_start_mib']:.1f} -> "
              f"{rss['stored_end_mib']:.1f}; "
              f"threads {rss['threads_start']} -> {rss['threads_end']}")
    scrapes = report["metrics_scrapes"]
    if "max_s" in scrapes:
        print(f"/metrics scrapes: {scrapes['scrapes']}, failed "
              f"{scrapes['failed']}, over {SCRAPE_LIMIT_S:.0f} s "
              f"{scrapes['over_limit']}; latency median "
              f"{1000 * scrapes['median_s']:.1f} ms, p99 "
              f"{1000 * scrapes['p99_s']:.1f} ms, max "
              f"{1000 * scrapes['max_s']:.1f} ms")
    for failure in scrapes["failures"]:
        print(f"  scrape failed: {failure}")
    hostile = report["hostile"]
    if hostile["on"]:
        print("hostile mix (action: outcome count):")
        for action, outcomes in sorted(hostile["actions"].items()):
            print(f"  {action}: " + ", ".join(
                f"{outcome} {n}" for outcome, n in outcomes.items()))
        for name, d in hostile["distributions"].items():
            print(f"  {name}: n {d['n']}, min {d['min']:.2f}, median "
                  f"{d['median']:.2f}, max {d['max']:.2f}")
        for key, n in hostile["unexpected"].items():
            print(f"  unexpected: {key} x{n}")
        for example in hostile["examples"]:
            print(f"  e.g. {example}")
    print(f"server exit status: {report['server_exit_status']}")
    for example in report["examples"]:
        print(f"  e.g. {example}")
    if report["failures"]:
        print("FAIL:\n  " + "\n  ".join(report["failures"]))
    else:
        print("PASS")


def run_load(args: argparse.Namespace, seed: int, server: Server,
             failures: List[str]) -> Dict:
    """Sets up the corpora, runs the load for args.duration seconds, stops
    the server; returns the report (without its verdict). Appends to
    `failures` what the threads and the final state checks found."""
    stats = Stats()
    model = Model()
    checker = Checker(model, stats, args.backend)
    stop = threading.Event()
    grpc_port, metrics_port = server.wait_ports()
    target = f"127.0.0.1:{grpc_port}"
    gate = WriteGate()
    hostile = HostileStats()
    sampler = Sampler(server, stop)
    sampler.start()
    try:
        with maxsimd.Client(target, default_timeout=CALL_TIMEOUT_S) as client:
            client.wait_until_serving()
            writer = Writer(client, checker, server.files_dir,
                            args.writes_per_second, seed, gate)
            writer.setup()
            threads = [QueryWorker(kind, i, target, checker,
                                   seed * 100 + n + 1, stop, failures)
                       for n, (kind, i) in enumerate(
                           [("rerank", 0), ("rerank", 1), ("batch", 0),
                            ("stream", 0)])]
            threads.append(threading.Thread(
                target=writer.run, args=(stop, failures), name="writer"))
            if args.hostile:
                threads += start_hostile(target, grpc_port, metrics_port,
                                         checker, gate, seed * 100 + 50,
                                         hostile, stop, failures)
            load_start = time.monotonic()
            warmup_s = (load_start - sampler.start_time) + max(
                MIN_WARMUP_S, args.warmup * args.duration)
            for thread in threads:
                thread.start()
            while not stop.wait(1.0) and \
                    time.monotonic() - load_start < args.duration:
                if server.proc.poll() is not None:
                    failures.append(f"the server exited with status "
                                    f"{server.proc.returncode} during the "
                                    f"load:\n{server.tail()}")
                    break
            stop.set()
            for thread in threads:
                thread.join(timeout=CALL_TIMEOUT_S * 2)
                if thread.is_alive():
                    failures.append(f"{thread.name} did not finish")
            duration = time.monotonic() - load_start
            if server.proc.poll() is None:
                failures.extend(final_state_errors(client, model))
    finally:
        stop.set()
        exit_status = server.terminate()
        sampler.join()

    names = sorted(set(stats.sent) | set(stats.answered))
    return {
        "seed": seed, "backend": args.backend, "duration_s": duration,
        "server_command": server.command,
        "requests": {rpc: {"sent": stats.sent[rpc],
                           "answered": stats.answered[rpc],
                           "checked": stats.checked[rpc]}
                     for rpc in names},
        "errors_by_code": errors_by_code(stats),
        "unexpected_errors": {f"{rpc} {code}": n
                              for (rpc, code), n in stats.errors.items()},
        "expected_errors": {f"{rpc} {code} ({why})": n
                            for (rpc, code, why), n in stats.expected.items()},
        "mismatches": stats.mismatches, "lost": stats.lost,
        "duplicated": stats.duplicated, "examples": stats.examples,
        "writes_acked": dict(writer.acked),
        "snapshot_checks": writer.snapshots,
        "compactions_logged": len(re.findall(r"compacted corpus \"soak_",
                                             server.log())),
        "rss": rss_report(sampler.samples, warmup_s),
        "rss_tolerance": args.rss_tolerance,
        # [seconds, VmRSS, RssAnon, RssFile, Stored (KiB), Threads]; see
        # Server.memory
        "rss_samples": [[round(t, 1), m["VmRSS"], m["RssAnon"], m["RssFile"],
                         m["Stored"], m["Threads"]]
                        for t, m in sampler.samples],
        "server_exit_status": exit_status,
        "metrics_scrapes": sampler.scrape_report(),
        "hostile": dict(on=args.hostile, **hostile.report()),
    }


def verdict(report: Dict) -> List[str]:
    """The checks of the module docstring that the report fails."""
    failures = []
    unexpected = sum(report["unexpected_errors"].values())
    if unexpected:
        failures.append(f"{unexpected} unexpected errors")
    for what in ("mismatches", "lost", "duplicated"):
        if report[what]:
            failures.append(f"{report[what]} {what}")
    for rpc in ("Rerank", "RerankBatch queries", "RerankStream",
                "AddDocuments", "DeleteDocuments", "SetAlias",
                "SnapshotCorpus"):
        if not report["requests"].get(rpc, {}).get("answered"):
            failures.append(f"no {rpc} answered")
    rss = report["rss"]
    if not rss:
        failures.append(f"fewer than {3 * RSS_WINDOW_S} s of RSS samples "
                        "after the warm-up")
    elif rss["spread"] > report["rss_tolerance"]:
        failures.append(
            f"RSS not flat after the warm-up: {RSS_WINDOW_S} s medians from "
            f"{rss['level_min_mib']:.1f} to {rss['level_max_mib']:.1f} MiB "
            f"({100 * rss['spread']:.2f}% > "
            f"{100 * report['rss_tolerance']:.0f}%)")
    if not report["compactions_logged"]:
        failures.append("the server logged no compaction")
    if report["server_exit_status"] != 0:
        failures.append(f"the server exited {report['server_exit_status']} "
                        "on SIGTERM")
    scrapes = report["metrics_scrapes"]
    if scrapes["failed"]:
        failures.append(f"{scrapes['failed']} of {scrapes['scrapes']} "
                        "/metrics scrapes failed")
    if scrapes["over_limit"]:
        failures.append(f"{scrapes['over_limit']} /metrics scrapes took "
                        f"more than {SCRAPE_LIMIT_S:.0f} s (the longest "
                        f"{scrapes['max_s']:.2f} s)")
    hostile = report["hostile"]
    if hostile["unexpected"]:
        failures.append(f"{sum(hostile['unexpected'].values())} unexpected "
                        "outcomes of the hostile mix")
    if hostile["on"]:
        if not report["requests"].get(GarbageCalls.RPC, {}).get("answered"):
            failures.append(f"no {GarbageCalls.RPC} answered")
        for action, outcome in HOSTILE_COVERAGE:
            if not hostile["actions"].get(action, {}).get(outcome):
                failures.append(f"hostile mix: no {action!r} {outcome!r}")
    return failures


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True,
                        help="the maxsimd binary")
    parser.add_argument("--duration", type=float, default=600.0,
                        help="seconds of load (default 600)")
    parser.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: start the server with --cpu; gpu: without"
                        " it, and round queries to the storage dtype in the"
                        " reference as the GPU does")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed (default: from the clock; printed)")
    parser.add_argument("--writes_per_second", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=0.25,
                        help="share of the run before RSS is held flat "
                        f"(at least {MIN_WARMUP_S:.0f} s)")
    parser.add_argument("--rss_tolerance", type=float, default=0.05)
    parser.add_argument("--no_hostile", dest="hostile", action="store_false",
                        help="without the hostile mix (stalled and excess "
                        "write streams, idle and slow connections, garbage "
                        "messages) and its server flags")
    parser.add_argument("--server_flag", action="append", default=[],
                        help="one more server flag (repeatable), e.g. "
                        "--server_flag=--devices=0")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work folder (data, log) even on a pass")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    print(f"soak: seed {seed}, {args.duration:.0f} s, backend {args.backend}",
          flush=True)

    work = Path(tempfile.mkdtemp(prefix="maxsimd-soak-"))
    server = Server(args.server, args.backend, work,
                    (list(HOSTILE_SERVER_FLAGS) if args.hostile else []) +
                    args.server_flag)
    failures: List[str] = []
    try:
        report = run_load(args, seed, server, failures)
    except BaseException:
        print(f"soak: work folder kept: {work}", file=sys.stderr)
        raise
    report["failures"] = failures + verdict(report)
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if report["failures"] or args.keep:
        print(f"soak: work folder (data, server.log): {work}")
    else:
        shutil.rmtree(work)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
